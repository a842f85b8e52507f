"""What the engine and the ranker produce, and what reporters render."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from diagnose.evidence.model import EvidenceItem

if TYPE_CHECKING:
    from diagnose.evidence.model import Evidence, Gap
    from diagnose.rules.model import Rule


@dataclass(frozen=True)
class Finding:
    """A rule that matched, with what it matched."""

    rule: Rule
    evidence: tuple[EvidenceItem, ...]
    captures: Mapping[str, str]
    time: float | None  # earliest evidence time, if known
    order: tuple[int, int]  # (source order, line) of the earliest evidence, for ties without time
    # Every (source, line) the rule's text conditions kept, beyond the few shown as evidence: the
    # ranker leaves crashes on these lines out of the "unrecognised" fallback.
    matched: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True)
class Skipped:
    rule_id: str
    reason: str


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    category: str
    role: str
    severity: str
    confidence: float
    score: float
    evidence: tuple[EvidenceItem, ...]
    explanation: str
    fix: tuple[str, ...]
    references: tuple[str, ...]
    relaunch: str | None = None
    time: float | None = None
    explains: tuple[str, ...] = ()  # ids of symptoms this cause accounts for


@dataclass
class Diagnosis:
    evidence: Evidence
    causes: list[Cause]
    skipped: list[Skipped]
    gaps: list[Gap]
    stats: dict[str, object] = field(default_factory=dict)
