"""Errors that end the program with exit code 2 and one clear line (never a traceback)."""

from __future__ import annotations


class DiagnoseError(Exception):
    """A usage, input, config or rule-load problem. The message is shown as-is."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        # Extra lines (e.g. every problem of every rule file) printed after the message.
        self.details = details or []


class InputError(DiagnoseError):
    """A path that cannot be read as evidence: missing, binary, empty directory..."""


class RuleError(DiagnoseError):
    """One or more rule files are malformed. details holds 'file:line: problem' lines."""


class ConfigError(DiagnoseError):
    """The diagnose config file is malformed."""
