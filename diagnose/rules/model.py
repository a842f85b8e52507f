"""The rule model: rules, their conditions and tests, and the loaded rule set (plain data)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose.evidence.model import TextKind
from diagnose.rules.conditions import FactCondition

OPS = ("all", "any", "none", "maybe")
TEXT_KINDS = {kind.value: kind for kind in TextKind}
ID_SHAPE = re.compile(r"^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)+$")

REQUIRED_KEYS = ("id", "title", "category", "role", "severity", "confidence", "when", "explanation", "fix")
OPTIONAL_KEYS = ("references", "relaunch", "tests", "analyze", "tags")
TEST_CASE_KEYS = ("log", "dmesg", "packages", "tmux", "files", "checkpoint", "gpu", "exits", "process", "metrics", "captures",
                  "note")


@dataclass(frozen=True)
class TextCondition:
    kind: TextKind
    pattern: str
    line: int

    def describe(self) -> str:
        return f"{self.kind.value}: {self.pattern}"


@dataclass(frozen=True)
class Group:
    op: str  # all | any | none
    children: tuple[Condition, ...]
    line: int


Condition = TextCondition | FactCondition | Group


@dataclass(frozen=True)
class RuleTest:
    should_match: bool
    case: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    category: str
    role: str
    severity: str
    confidence: float
    when: Group
    explanation: str
    fix: tuple[str, ...]
    references: tuple[str, ...] = ()
    relaunch: str | None = None
    tests: tuple[RuleTest, ...] = ()
    analyze: str | None = None
    tags: tuple[str, ...] = ()
    path: Path = Path("?")
    builtin: bool = True

    def text_conditions(self) -> Iterable[TextCondition]:
        stack: list[Condition] = [self.when]
        while stack:
            cond = stack.pop()
            if isinstance(cond, Group):
                stack.extend(cond.children)
            elif isinstance(cond, TextCondition):
                yield cond

    def fact_conditions(self) -> Iterable[FactCondition]:
        stack: list[Condition] = [self.when]
        while stack:
            cond = stack.pop()
            if isinstance(cond, Group):
                stack.extend(cond.children)
            elif isinstance(cond, FactCondition):
                yield cond


@dataclass
class RuleSet:
    rules: list[Rule]
    overridden: list[tuple[str, Path, Path]] = field(default_factory=list)  # (id, user file, built-in file)
    sources: list[Path] = field(default_factory=list)

    def by_id(self) -> dict[str, Rule]:
        return {rule.id: rule for rule in self.rules}
