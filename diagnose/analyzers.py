"""Reasoning that a regex cannot do, attached to a rule with `analyze: <name>`.

An analyzer looks at a matched rule's hits (and any other evidence) and returns extra
captures and evidence, e.g. which rank was behind when an NCCL watchdog fired.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from diagnose.evidence import Evidence
from diagnose.findings import EvidenceItem
from diagnose.scan import FileScan, LineHit


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


Analyzer = Callable[[AnalyzerInput], AnalyzerOutput]
ANALYZERS: dict[str, Analyzer] = {}


def register(name: str) -> Callable[[Analyzer], Analyzer]:
    def wrap(func: Analyzer) -> Analyzer:
        ANALYZERS[name] = func
        return func

    return wrap
