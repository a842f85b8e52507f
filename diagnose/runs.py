"""What a RUN_ID means on this machine. (Filled in by the collectors work.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from diagnose.errors import DiagnoseError
from diagnose.evidence import Evidence


@dataclass
class Config:
    rule_dirs: list[Path] = field(default_factory=list)


def load_config(path: Path | None) -> Config:
    return Config()


def evidence_for_run(run_id: str, config: Config, search_dirs: list[Path], progress: bool = False) -> Evidence:
    raise DiagnoseError(f"{run_id}: not a bundle, and live run discovery is not available yet")
