"""What a single line tells besides its text: escape codes to strip, a timestamp, a rank prefix."""

from __future__ import annotations

import calendar
import re
import time
from datetime import datetime, timedelta, timezone

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and 2-byte escapes.
# None may span a '\r' or '\n': stripping must never join lines or shift line numbers.
ANSI_BYTES = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\r\n]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}

_ISO = re.compile(
    r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T _](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s?(Z|[+-]\d{2}:?\d{2})?"
)
_US = re.compile(r"(?<!\d)(\d{2})/(\d{2})/(\d{4})[ ,]+(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
_DMESG_SECS = re.compile(r"^\s*(?:<\d+>)?\[\s*(\d+\.\d+)\]")
_DMESG_HUMAN = re.compile(
    r"^\s*\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]"
)
_SYSLOG = re.compile(r"^(\w{3})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ")
_GLOG = re.compile(r"^\[?[IWEF](\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")

# torchrun's "[default0]:" and torch's "[rank0]:" in front of a glog-style "[E1130 05:07:56.342 ...]" line.
_LAUNCHER_PREFIX = re.compile(r"^\s*(?:\[[A-Za-z_]\w*?\d+\]:)?(?:\[rank\d+\]:)?")
# torchrun --tee prefixes the LOCAL rank ("[default3]:", by role name); torch's own "[rank11]:"
# after it is the global rank, so it wins when both are there.
# Ranks of at most 9 digits: int() refuses a hostile line's 5000-digit "rank".
_RANK = re.compile(r"^\s*\[[A-Za-z_]\w*?\d+\]:\[rank([0-9]{1,9})\]|^\s*\[(?:rank|default|Rank |RANK )([0-9]{1,9})\]:?|^\s*rank([0-9]{1,9}):\s")


def strip_ansi(data: bytes) -> bytes:
    return ANSI_BYTES.sub(b"", data) if b"\x1b" in data else data


# pdsh (DeepSpeed's multi-node runner, `pdsh -S -w hosts`) puts "<host>: " before every line.
_HOST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62}): ")


def split_host(line: str) -> tuple[str | None, str]:
    """("worker-1", "[rank1]: ...") for a pdsh line; (None, line) for any other."""
    match = _HOST.match(line)
    return (match.group(1), line[match.end():]) if match else (None, line)


def host_prefixed(lines: list[str]) -> bool:
    """Whether a log is pdsh output: most lines start with one of a few "<host>: " prefixes."""
    body = [line for line in lines if line.strip()][:400]
    hosts = [split_host(line)[0] for line in body]
    named = [h for h in hosts if h is not None]
    return len(body) >= 4 and len(named) >= 0.8 * len(body) and len(set(named)) <= max(1, len(named) // 4)


def rank_of(line: str) -> int | None:
    """The rank a torchrun-style prefix names: `[rank3]:`, `[default3]:`. (Behind pdsh's
    "<host>: " only in a file known to be pdsh output: callers strip it with split_host, since
    "RuntimeError: [rank0]: ..." is no host.)"""
    match = _RANK.match(line)
    if not match:
        return None
    return int(match.group(match.lastindex or 0))  # each alternative has one group


def _frac(text: str | None) -> float:
    return float("0." + text) if text else 0.0


def _local(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    try:
        return time.mktime((year, month, day, hh, mm, ss, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def log_time(line: str, year_hint: int | None = None) -> float | None:
    """Epoch seconds of a timestamp written in a log line, if it has one.

    Naive times are read as local time of this machine: what matters for ranking is that
    lines of one run compare consistently.
    """
    head = line[:160]
    match = _ISO.search(head)
    if match:
        y, mo, d, hh, mi, ss = (int(match.group(i)) for i in range(1, 7))
        if not (1 <= mo <= 12 and 1 <= d <= 31 and hh < 24 and mi < 60 and ss < 61):
            return None
        tz = match.group(8)
        if tz:
            try:
                offset = 0 if tz == "Z" else _tz_offset(tz)
                moment = datetime(y, mo, d, hh, mi, min(ss, 59), tzinfo=timezone(timedelta(seconds=offset)))
            except ValueError:
                return None
            return moment.timestamp() + _frac(match.group(7))
        base = _local(y, mo, d, hh, mi, ss)
        return None if base is None else base + _frac(match.group(7))
    match = _US.search(head)
    if match:
        mo, d, y, hh, mi, ss = (int(match.group(i)) for i in range(1, 7))
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            return None
        base = _local(y, mo, d, hh, mi, ss)
        return None if base is None else base + _frac(match.group(7))
    match = _GLOG.match(head) or _GLOG.match(_LAUNCHER_PREFIX.sub("", head, count=1))
    if match and year_hint:
        mo, d, hh, mi, ss = (int(match.group(i)) for i in range(1, 6))
        if 1 <= mo <= 12 and 1 <= d <= 31:
            base = _local(year_hint, mo, d, hh, mi, ss)
            return None if base is None else base + _frac(match.group(6))
    return None


def _tz_offset(tz: str) -> int:
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def kernel_time(line: str, boot_time: float | None, year_hint: int | None) -> float | None:
    """Epoch seconds of a kernel log line: dmesg [secs since boot], dmesg -T, or syslog/journal."""
    match = _DMESG_SECS.match(line)
    if match:
        return boot_time + float(match.group(1)) if boot_time is not None else None
    match = _DMESG_HUMAN.match(line)
    if match:
        month = _MONTHS.get(match.group(1))
        if month:
            return _local(int(match.group(6)), month, int(match.group(2)), *(int(match.group(i)) for i in (3, 4, 5)))
    match = _SYSLOG.match(line)
    if match and year_hint:
        month = _MONTHS.get(match.group(1))
        if month:
            return _local(year_hint, month, int(match.group(2)), *(int(match.group(i)) for i in (3, 4, 5)))
    return log_time(line, year_hint)


def dmesg_seconds(line: str) -> float | None:
    """The [secs since boot] stamp of a dmesg line."""
    match = _DMESG_SECS.match(line)
    return float(match.group(1)) if match else None
