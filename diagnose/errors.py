"""Errors that end the program with exit code 2 and one clear line (never a traceback), and the
one parse error that never does (it becomes a gap)."""

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


class ParseError(ValueError):
    """A captured output (nvidia-smi, NVML JSON, a tmux capture, an error file) that its parser
    cannot read. Never ends the program: the caller records it as a Gap, and the message names
    the source and where it broke ("nvidia-smi -q -x: malformed XML at line 3 (...)")."""
