"""Reporters: one module per output format behind one interface, chosen by the Format enum."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import IO, TYPE_CHECKING, Any, Protocol

from diagnose.engine.findings import Diagnosis

if TYPE_CHECKING:
    from diagnose.rules.model import Rule


class Format(str, Enum):
    TERMINAL = "terminal"
    JSON = "json"
    SARIF = "sarif"
    JUNIT = "junit"
    MARKDOWN = "markdown"
    GITHUB = "github"
    HTML = "html"


class Reporter(Protocol):
    """rules: the loaded rules by id (SARIF describes them; others may ignore it).
    fail_on: the --fail-on threshold, so a report can mark what fails the job (JUnit).
    options: what only some formats take (OPTIONS says which), e.g. the terminal's color."""

    def __call__(self, diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
                 rules: Mapping[str, Rule] | None = None, fail_on: str = "error", **options: Any) -> None: ...


# Format -> module under diagnose.report.render that defines `report(diagnosis, out, verbose, *, rules, fail_on)`.
# Modules whose name starts with "_" are helpers, not formats (a test holds this table exhaustive).
MODULES: dict[Format, str] = {
    Format.TERMINAL: "terminal",
    Format.JSON: "json_report",
    Format.SARIF: "sarif",
    Format.JUNIT: "junit",
    Format.MARKDOWN: "markdown",
    Format.GITHUB: "github",
    Format.HTML: "html",
}


# The formats that draw the run's timeline (the terminal's Ranks table, the HTML report); a
# diagnosis for none of them is made without one (app.diagnose(timeline=False)).
DRAWS_TIMELINE = frozenset({Format.TERMINAL, Format.HTML})


def draws_timeline(formats: Iterable[Format]) -> bool:
    return any(fmt in DRAWS_TIMELINE for fmt in formats)


# The keyword options a format's report() takes beyond the common ones; callers hand every format
# only its own (a format without options keeps the plain signature).
OPTIONS: dict[Format, frozenset[str]] = {
    Format.TERMINAL: frozenset({"color", "quiet"}),
    Format.SARIF: frozenset({"category"}),
}


def options_for(fmt: Format, options: Mapping[str, Any]) -> dict[str, Any]:
    wanted = OPTIONS.get(fmt, frozenset())
    return {key: value for key, value in options.items() if key in wanted and value is not None}


def module_reporter(fmt: Format) -> Reporter:
    """The format module's own report function, as it is: no masking. Use reporter() or render()."""
    module_name = MODULES.get(fmt)
    if module_name is None:
        raise NotImplementedError(f"the {fmt.value} format is not available yet")
    module = importlib.import_module(f"diagnose.report.{module_name}")
    func: Reporter = module.report
    return func


def reporter(fmt: Format) -> Reporter:
    """The reporter for a format, with secrets masked and control characters made visible before it
    sees the diagnosis: every way to a report goes through here, so no format (and no caller) can
    forget either."""
    raw = module_reporter(fmt)

    def masked(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
               rules: Mapping[str, Rule] | None = None, fail_on: str = "error", **options: Any) -> None:
        from diagnose.evidence.redact import scrub
        from diagnose.evidence.safetext import visible
        from diagnose.report.redact import redact_diagnosis

        # Masking sees the raw text (a secret's context may hold any byte); then every string a
        # format could print loses its terminal escapes, bidi overrides, newlines and surrogates.
        raw(scrub(redact_diagnosis(diagnosis), visible), out, verbose, rules=rules, fail_on=fail_on,
            **options_for(fmt, options))

    return masked


def render(fmt: Format, diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, Rule] | None = None, fail_on: str = "error", **options: Any) -> None:
    """Write the report of one format (secrets masked, control characters made visible); options
    a format does not take are left out for it."""
    reporter(fmt)(diagnosis, out, verbose, rules=rules, fail_on=fail_on, **options)
