"""The analyzer contract: what an analyzer gets and what it may return."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from diagnose.engine.scan import FileScan, LineHit
from diagnose.evidence.model import Evidence, EvidenceItem


@dataclass
class AnalyzerInput:
    evidence: Evidence
    hits: Sequence[tuple[FileScan, LineHit]]  # every kept hit of the rule's text conditions
    captures: Mapping[str, str]


@dataclass
class AnalyzerOutput:
    captures: dict[str, str] = field(default_factory=dict)
    evidence: list[EvidenceItem] = field(default_factory=list)
    confidence_delta: float = 0.0
    discard: bool = False  # the rule's lines matched, but the analysis shows the rule does not hold
    lead: bool = False  # its evidence goes before the rule's own matched lines (it is the more telling)


Analyzer = Callable[[AnalyzerInput], AnalyzerOutput]
ANALYZERS: dict[str, Analyzer] = {}


def register(name: str) -> Callable[[Analyzer], Analyzer]:
    def wrap(func: Analyzer) -> Analyzer:
        ANALYZERS[name] = func
        return func

    return wrap
