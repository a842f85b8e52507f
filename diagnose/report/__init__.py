"""Reporters: one module per output format behind one interface, chosen by the Format enum."""

from __future__ import annotations

import importlib
from enum import Enum
from typing import IO, Protocol

from diagnose.findings import Diagnosis


class Format(str, Enum):
    TERMINAL = "terminal"
    JSON = "json"
    SARIF = "sarif"
    JUNIT = "junit"
    MARKDOWN = "markdown"
    GITHUB = "github"


class Reporter(Protocol):
    def __call__(self, diagnosis: Diagnosis, out: IO[str], verbose: bool = False) -> None: ...


# Format -> module under diagnose.report that defines `report(diagnosis, out, verbose)`.
MODULES: dict[Format, str] = {
    Format.TERMINAL: "terminal",
    Format.JSON: "json_report",
}


def reporter(fmt: Format) -> Reporter:
    module_name = MODULES.get(fmt)
    if module_name is None:
        raise NotImplementedError(f"the {fmt.value} format is not available yet")
    module = importlib.import_module(f"diagnose.report.{module_name}")
    func: Reporter = module.report
    return func
