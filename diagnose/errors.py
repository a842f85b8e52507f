"""Errors that end the program with exit code 2 and one clear line (never a traceback), and the
one parse error that never does (it becomes a gap)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit-code contract (README): a tool error is never a finding, and the reverse."""

    OK = 0  # ran; nothing at or above --fail-on
    FINDINGS = 1  # ran; a cause at or above --fail-on
    ERROR = 2  # usage, config, rule-load or input error, a bug of ours, or nothing relates to the run id
    INTERRUPTED = 130  # Ctrl-C


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
