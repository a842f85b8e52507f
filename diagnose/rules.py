"""Load and validate YAML rules. Every problem of every file is reported at once, with
file:line, before any work starts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.errors import RuleError
from diagnose.evidence import TextKind
from diagnose.facts import FactCondition

if TYPE_CHECKING:
    from diagnose.yamlnodes import Problems

ROLES = ("root", "symptom", "context")
SEVERITIES = ("critical", "error", "warning", "info")
RELAUNCH = ("yes", "no", "maybe")
OPS = ("all", "any", "none", "maybe")
TEXT_KINDS = {kind.value: kind for kind in TextKind}
ID_SHAPE = re.compile(r"^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)+$")

REQUIRED_KEYS = ("id", "title", "category", "role", "severity", "confidence", "when", "explanation", "fix")
OPTIONAL_KEYS = ("references", "relaunch", "tests", "analyze", "tags")
TEST_CASE_KEYS = ("log", "dmesg", "packages", "tmux", "files", "checkpoint", "gpu", "exits", "process", "captures", "note")


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


# Bounds on what one rule may ask of the scanner: a 7.8 MB alternation takes minutes to
# compile. The pack's longest pattern is ~520 characters and its busiest rule has 12.
MAX_PATTERN_CHARS = 4096
MAX_PATTERNS_PER_RULE = 64


def check_pattern(pattern: str, check_hang: bool = True) -> str | None:
    """Why a line pattern is unusable, or None."""
    import regex

    from diagnose import regexcheck

    if len(pattern) > MAX_PATTERN_CHARS:
        # Checked before compiling: compiling is what takes the time.
        return (f"regex {pattern[:40]!r}... is {len(pattern):,} characters long; the limit is "
                f"{MAX_PATTERN_CHARS:,} (split a long list of alternatives into several conditions)")
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        return f"bad regex {pattern!r}: {exc}"
    if compiled.search("") is not None:
        return f"regex {pattern!r} matches an empty line, so it would match every line"
    if check_hang:
        problem = regexcheck.static_problem(pattern) or regexcheck.torture_problem(pattern)
        if problem:
            return f"regex {pattern!r}: {problem}"
    return None


# ---------------------------------------------------------------- loading folders


def builtin_rules_dir() -> Path:
    """The built-in rule pack: diagnose/builtin_rules in an installed wheel (pyproject maps the
    top-level rules/ there), or rules/ in a source checkout. Plain paths: importlib.resources
    costs ~25 ms of imports on every start."""
    here = Path(__file__).resolve().parent
    installed = here / "builtin_rules"
    return installed if installed.is_dir() else here.parent / "rules"


def rule_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def load_rule_file(path: Path, problems: Problems, check_hang: bool = True) -> Rule | None:
    # The YAML parser is only needed when the rule cache misses (see rulecache.py).
    from diagnose.ruleparse import RuleParser
    from diagnose.yamlnodes import load_yaml

    doc = load_yaml(path, problems)
    if doc is None:
        return None
    return RuleParser(doc, problems, check_hang).parse()


def load_rules(extra_dirs: Sequence[Path] = (), builtin: bool = True) -> RuleSet:
    """The built-in pack plus user folders; a user rule with a built-in id replaces it.

    Built-in rules are held to the hang checks by the test suite, so only user rules pay
    for the torture run at load time.
    """
    from diagnose.yamlnodes import Problems

    problems = Problems()
    rules: dict[str, Rule] = {}
    origin: dict[str, Path] = {}
    overridden: list[tuple[str, Path, Path]] = []
    sources: list[Path] = []
    folders: list[tuple[Path, bool]] = [(builtin_rules_dir(), True)] if builtin else []
    for folder in extra_dirs:
        if not folder.exists():
            raise RuleError(f"rule folder {folder}: no such file or directory")
        folders.append((folder, False))
    for folder, is_builtin in folders:
        files = [folder] if folder.is_file() else rule_files(folder)
        sources.append(folder)
        seen_here: dict[str, Path] = {}
        for path in files:
            rule = load_rule_file(path, problems, check_hang=not is_builtin)
            if rule is None:
                continue
            if rule.id in seen_here:
                problems.add(path, 1, f"rule id '{rule.id}' is also defined in {seen_here[rule.id]}")
                continue
            seen_here[rule.id] = path
            if not is_builtin:
                rule = _replace(rule, builtin=False)
            if rule.id in rules and not is_builtin:
                overridden.append((rule.id, path, origin[rule.id]))
            rules[rule.id] = rule
            origin[rule.id] = path
    if problems:
        count = len(problems.items)
        raise RuleError(f"{count} problem{'s' if count != 1 else ''} in rule files", problems.items)
    return RuleSet(list(rules.values()), overridden, sources)


def _replace(rule: Rule, **changes: Any) -> Rule:
    from dataclasses import replace

    return replace(rule, **changes)
