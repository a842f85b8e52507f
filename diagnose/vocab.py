"""The one vocabulary of a cause: severity (ordered), role, relaunch, and what counts as a crash.

Values are plain strings on the wire (rule files, JSON, SARIF); in code they are these enums,
which compare equal to their strings and print as them.
"""

from __future__ import annotations

from enum import Enum


class _Word(str, Enum):
    # Print and format as the bare word ("error"), never "Severity.ERROR".
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(_Word):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def order(self) -> int:
        """0 for the most severe."""
        return SEVERITIES.index(self)

    @property
    def weight(self) -> float:
        """How much the severity counts in a cause's score."""
        return _WEIGHT[self]

    def at_least(self, threshold: Severity | str) -> bool:
        return self.order <= Severity(threshold).order


SEVERITIES: tuple[Severity, ...] = tuple(Severity)  # most severe first
_WEIGHT = {Severity.CRITICAL: 1.0, Severity.ERROR: 0.85, Severity.WARNING: 0.6, Severity.INFO: 0.3}

NEVER = "never"
FAIL_ON: tuple[str, ...] = (Severity.CRITICAL.value, Severity.ERROR.value, Severity.WARNING.value, NEVER)  # --fail-on


class Role(_Word):
    ROOT = "root"  # the cause to fix
    SYMPTOM = "symptom"  # follows from a root (a watchdog timeout after a rank died); never outranks it
    CONTEXT = "context"  # worth knowing, not a cause


ROLES: tuple[Role, ...] = tuple(Role)


class Relaunch(_Word):
    YES = "yes"
    NO = "no"
    MAYBE = "maybe"

    @property
    def advice(self) -> str:
        return _ADVICE[self]


RELAUNCHES: tuple[Relaunch, ...] = tuple(Relaunch)
_ADVICE = {
    Relaunch.YES: "a plain relaunch may succeed",
    Relaunch.NO: "a plain relaunch will fail the same way; fix first",
    Relaunch.MAYBE: "a relaunch may or may not help; fix the cause first if you can",
}


def is_crash_level(role: str, severity: str) -> bool:
    """A root cause severe enough to have ended the run: ranked first, and what a crash is blamed on."""
    return role == Role.ROOT and severity in (Severity.CRITICAL, Severity.ERROR)


def relaunch_advice(value: str) -> str:
    try:
        return Relaunch(value).advice
    except ValueError:
        return value
