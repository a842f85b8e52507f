"""What a single line tells besides its text: escape codes to strip, a timestamp, a rank prefix."""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import AnyStr, NamedTuple

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and 2-byte escapes.
# None may span a '\r' or '\n': stripping must never join lines or shift line numbers. ESC is
# written once, ahead of the alternatives: the matchers look for it first (a GiB of real log
# text is stripped ~40 % faster than with ESC repeated in each alternative).
ANSI_BYTES = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\r\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")
ANSI_TEXT = re.compile(ANSI_BYTES.pattern.decode("ascii"))  # the same, for text already decoded

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
# glog's time: "W1130 05:07:56.342000" (month, day, hour, minute, second, fraction; no year).
_GLOG_TIME = r"^\[?[IWEF](\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6})\d*)?"
GLOG_TIME = _GLOG = re.compile(_GLOG_TIME)
# The whole glog header: "W1130 05:07:56.342000 1234 torch/distributed/elastic/agent/server/api.py:897] "
# as torch.distributed's Python logging prints it, "[E1130 05:07:56.342586651 ProcessGroupNCCL.cpp:1168] "
# as torch's C++ logging does (no thread id).
GLOG_HEADER = re.compile(_GLOG_TIME + r"(?:\s+\d+)?\s+[^\s\]]+:\d+\]\s*")

# ---------------------------------------------------------------- launcher prefixes
#
# Launchers put their own text in front of every line a rank writes; rules and the traceback
# reader look through it. Each prefix is matched at the start of what is left, up to
# MAX_PREFIXES deep ("Dec 01 20:44:22 node01: [default0]:[rank0]: Traceback ..."), and each
# takes at most the one space after it, so a frame's indentation stays as Python wrote it.
# Every pattern is anchored and bounded: no line costs more than a few hundred steps.
MAX_PREFIXES = 4
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_SYSLOG_STAMP = rf"{_MON} [ 0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9](?:\.[0-9]{{1,9}})?"
# One alternation, so that a layer costs one match call; the first alternative that matches wins.
_TEE = r"\[(?:[A-Za-z_][\w-]{0,30}?)(?P<tee>[0-9]{1,9})\]:(?=\[(?:rank|Rank |RANK )[0-9])"
_TEE_DEFAULT = r"\[default(?P<tee2>[0-9]{1,9})\]:"
_TORCH_RANK = r"\[(?:rank|Rank |RANK )(?P<rank>[0-9]{1,9})\]:? ?"
_RANK_WORD = r"rank(?P<rank2>[0-9]{1,9}): "
# journald / syslog: "Dec 01 20:44:22 host python[123]: " (the kernel's own lines name no pid)
_JOURNAL = rf"(?P<jstamp>{_SYSLOG_STAMP}) (?P<jhost>[\w.-]{{1,64}}) [\w./@-]{{1,64}}?(?:\[[0-9]{{1,10}}\]|(?<=kernel)): "
# moreutils ts: "Dec 01 20:44:22 " (default), "2026-12-01 20:44:22 " (%F %T), "20:44:22 " (-s, -i), bracketed too
_TS_SYSLOG = rf"(?P<stamp>{_SYSLOG_STAMP}) "
_TS_ISO = (r"\[?(?P<stamp2>[0-9]{4}-[01][0-9]-[0-3][0-9][T ][0-2][0-9]:[0-5][0-9]:[0-6][0-9](?:\.[0-9]{1,9})?"
           r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?)\]? ")
_TS_CLOCK = r"\[?(?P<stamp3>[0-2][0-9]:[0-5][0-9]:[0-6][0-9](?:\.[0-9]{1,9})?)\]? "
# srun --label: "0: ", padded to the width of the largest task id (" 3: ")
_TASK = r" {0,5}(?P<task>[0-9]{1,6}): "
# pdsh (and DeepSpeed's multi-node launcher, through pdsh): "node01: ", "worker-1: ", "10.0.0.2: ".
# A host name here is lower case and holds a digit (or is localhost): "Warning: ", "ValueError: ",
# "torch.distributed...ChildFailedError: " and "fp_config: " are not host names.
_HOST = r"(?P<host>(?=[a-z0-9.-]{0,252}[0-9]|localhost[.:])[a-z0-9][a-z0-9-]{0,62}(?:\.[a-z0-9-]{1,63}){0,8}): "
# One alternation per first character, so that a layer costs one match call of the few
# alternatives that can start there; the first alternative that matches wins.
_BRACKET = re.compile("|".join((_TEE, _TEE_DEFAULT, _TORCH_RANK, _TS_ISO, _TS_CLOCK)))
_DIGIT = re.compile("|".join((_TS_ISO, _TS_CLOCK, _TASK, _HOST)))
_SPACE = re.compile(_TASK)
_MONTH = re.compile("|".join((_JOURNAL, _TS_SYSLOG)))
_LOWER = re.compile("|".join((_RANK_WORD, _HOST)))
_PREFIX_BY_START: dict[str, re.Pattern[str]] = {"[": _BRACKET, " ": _SPACE}
_PREFIX_BY_START.update(dict.fromkeys("0123456789", _DIGIT))
_PREFIX_BY_START.update(dict.fromkeys("JFMASOND", _MONTH))
_PREFIX_BY_START.update(dict.fromkeys("abcdefghijklmnopqrstuvwxyz", _LOWER))
_FIELD_OF = {"tee": "local_rank", "tee2": "local_rank", "rank": "rank", "rank2": "rank", "task": "task",
             "jhost": "host", "host": "host", "jstamp": "stamp", "stamp": "stamp", "stamp2": "stamp", "stamp3": "stamp"}


class LinePrefix(NamedTuple):
    """What the launchers' prefixes in front of a line say (each field None where none said it)."""

    rank: int | None = None  # torch's global [rankN]
    local_rank: int | None = None  # torchrun --tee's [defaultN]
    task: int | None = None  # srun --label's task id
    host: str | None = None  # pdsh / DeepSpeed / journald host
    stamp: str | None = None  # a ts / journald timestamp, as written
    width: int = 0  # characters of the line the prefixes take

    @property
    def global_rank(self) -> int | None:
        """The rank the line speaks for: torch's own, else srun's task, else torchrun's local rank."""
        for value in (self.rank, self.task, self.local_rank):
            if value is not None:
                return value
        return None


NO_PREFIX = LinePrefix()


def split_prefix(line: str) -> tuple[LinePrefix, str]:
    """The launcher prefixes of a line and the line as the program wrote it."""
    prefix = prefix_of(line)
    return prefix, (line[prefix.width:] if prefix.width else line)


def prefix_of(line: str) -> LinePrefix:
    """The launcher prefixes of a line (NO_PREFIX, allocating nothing, for most lines)."""
    pattern = _PREFIX_BY_START.get(line[:1])
    if pattern is None:
        return NO_PREFIX
    match = pattern.match(line)
    if match is None:
        return NO_PREFIX
    pos = 0
    fields: dict[str, str] = {}
    for _ in range(MAX_PREFIXES):
        if match is None or match.end() == pos:
            break
        group = match.lastgroup or ""
        fields.setdefault(_FIELD_OF[group], match.group(group))
        if group == "jhost":
            fields.setdefault("stamp", match.group("jstamp"))
        pos = match.end()
        pattern = _PREFIX_BY_START.get(line[pos : pos + 1])
        match = pattern.match(line, pos) if pattern is not None else None
    if not pos:
        return NO_PREFIX
    get = fields.get
    return LinePrefix(_int(get("rank")), _int(get("local_rank")), _int(get("task")), get("host"), get("stamp"), pos)


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)




def strip_prefix(line: str) -> str:
    return split_prefix(line)[1]


def strip_ansi(data: AnyStr) -> AnyStr:
    """Bytes or text without terminal escapes (colours, cursor moves, titles)."""
    if isinstance(data, bytes):
        return ANSI_BYTES.sub(b"", data) if b"\x1b" in data else data
    return ANSI_TEXT.sub("", data) if "\x1b" in data else data


# pdsh (DeepSpeed's multi-node runner, `pdsh -S -w hosts`) puts "<host>: " before every line.
_PDSH_HOST = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62}): ")


def split_host(line: str) -> tuple[str | None, str]:
    """("worker-1", "[rank1]: ...") for a pdsh line; (None, line) for any other."""
    match = _PDSH_HOST.match(line)
    return (match.group(1), line[match.end():]) if match else (None, line)


def host_prefixed(lines: list[str]) -> bool:
    """Whether a log is pdsh output: most lines start with one of a few "<host>: " prefixes."""
    body = [line for line in lines if line.strip()][:400]
    hosts = [split_host(line)[0] for line in body]
    named = [h for h in hosts if h is not None]
    return len(body) >= 4 and len(named) >= 0.8 * len(body) and len(set(named)) <= max(1, len(named) // 4)


def rank_of(line: str) -> int | None:
    """The rank a launcher prefix names: torch's `[rank3]:`, srun's `3: `, torchrun's `[default3]:`."""
    return prefix_of(line).global_rank


def _frac(text: str | None) -> float:
    return float("0." + text) if text else 0.0


def _local(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    try:
        return time.mktime((year, month, day, hh, mm, ss, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def log_time(line: str, year_hint: int | None = None, not_after: float | None = None) -> float | None:
    """Epoch seconds of a timestamp written in a log line, if it has one.

    Naive times are read as local time of this machine: what matters for ranking is that
    lines of one run compare consistently. A time without a year (glog, ts, journald) needs
    `year_hint` (log_clock: the log's own dates or its mtime) and is placed at or before
    `not_after` (the log's end) where that is known.
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
    if not year_hint:
        return None
    prefix, body = split_prefix(head)
    if prefix.stamp:
        match = _SYSLOG.match(prefix.stamp + " ")
        if match:  # ts / journald: "Dec 01 20:44:22"
            month = _MONTHS.get(match.group(1))
            if month:
                return _yearless(year_hint, not_after, month, *(int(match.group(i)) for i in (2, 3, 4, 5)))
    match = _GLOG.match(head) or _GLOG.match(body)
    if match:
        mo, d, hh, mi, ss = (int(match.group(i)) for i in range(1, 6))
        if 1 <= mo <= 12 and 1 <= d <= 31:
            base = _yearless(year_hint, not_after, mo, d, hh, mi, ss)
            return None if base is None else base + _frac(match.group(6))
    return None


YEAR_SLACK = 2 * 86400.0  # a year-less time this far past the log's end belongs to the year before


def _yearless(year: int, not_after: float | None, month: int, day: int, hh: int, mm: int, ss: int) -> float | None:
    """A time written without its year (glog, syslog, ts): in `year`, or in the year before when
    that would put it after the log's end (a log that ran over New Year)."""
    moment = _local(year, month, day, hh, mm, ss)
    if moment is not None and not_after is not None and moment > not_after + YEAR_SLACK:
        return _local(year - 1, month, day, hh, mm, ss)
    return moment


@dataclass(frozen=True)
class LogClock:
    """The year for a log's year-less times, and the moment none of its lines can be after."""

    year: int | None
    not_after: float | None
    source: str  # "the log's own dates" | "the file's mtime" | ""


def log_clock(head: str, tail: str, mtime: float | None) -> LogClock:
    """Where a log's year-less times take their year from: the last full date the log itself
    writes (its tail, else its head), else the file's mtime; never today's date. A pasted or
    copied log's mtime is the copy's, so the log's own dates come first."""
    for text in (tail, head):
        for line in reversed(text.splitlines()[-400:]):
            if not any(ch.isdigit() for ch in line[:160]):
                continue
            match = _ISO.search(line[:160]) or _US.search(line[:160])
            if match is None:
                continue
            moment = log_time(line)
            if moment is not None:
                return LogClock(time.localtime(moment).tm_year, moment if text is tail else None, "the log's own dates")
    if mtime:
        return LogClock(time.localtime(mtime).tm_year, mtime, "the file's mtime")
    return LogClock(None, None, "")


def _tz_offset(tz: str) -> int:
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def kernel_time(line: str, boot_time: float | None, year_hint: int | None, not_after: float | None = None) -> float | None:
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
            return _yearless(year_hint, not_after, month, *(int(match.group(i)) for i in (2, 3, 4, 5)))
    return log_time(line, year_hint, not_after)


def dmesg_seconds(line: str) -> float | None:
    """The [secs since boot] stamp of a dmesg line."""
    match = _DMESG_SECS.match(line)
    return float(match.group(1)) if match else None


# ---------------------------------------------------------------- the NVIDIA driver's Xid line
#
# "NVRM: Xid (PCI:0000:00:06): 43, pid=680, name=python3, channel 0x0000000a" (dmesg on an H200,
# tests/data/samples/h200). The pid and name are missing on some Xids ("...: 79, GPU has fallen
# off the bus."), the name alone on others ("...: 63, pid=1896, Row Remapper: ..."), and both may
# be the driver's quoted placeholder (rules/gpu/gpu.xid-*.yaml quote real lines of each shape).
# On MIG the PCI address is followed by the GPU and compute instance. Bounded, so a hostile line
# costs linear time; read by engine/kernel_events.py (events tied to runs) and
# engine/analyzers/cuda.py (the Xid table): one pattern, so the two never disagree on a line.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]{1,32})[^)]{0,40}\): (?P<xid>\d{1,4}),"
    r"(?: pid=(?P<pid>'?[^,]{0,24}'?),)?(?: name=(?P<name>[^,]{0,64}),)? ?(?P<msg>.*)"
)


class XidLine(NamedTuple):
    xid: int
    pci: str
    pid: str | None  # as printed: digits, or the driver's quoted placeholder
    name: str | None  # as printed (may hold spaces around it)
    message: str  # what follows, stripped


def xid_line(line: str) -> XidLine | None:
    """The fields of the driver's Xid line, wherever it stands in `line` (syslog, journal and
    dmesg stamps in front); None for any other line."""
    if "Xid" not in line:  # most kernel lines: no regex run at all
        return None
    match = XID_LINE.search(line)
    if match is None:
        return None
    return XidLine(int(match.group("xid")), match.group("pci"), match.group("pid"), match.group("name"),
                   match.group("msg").strip())


# ---------------------------------------------------------------- progress and finishing
#
# A run that printed an error and then went on (a retried read, a logged and skipped batch)
# survived it. Going on means a progress line whose counter moved: a tqdm count (n/total), a
# step / iteration / epoch number, or a loss line that is not a repeat of the last one before
# the error (tqdm prints its bar again, unchanged, when the interpreter shuts down). Every
# pattern is bounded and anchored on a literal, so a hostile line costs linear time.
_TQDM = re.compile(r"(?<![\d/])(?P<n>[0-9]{1,12})/(?P<total>[0-9]{1,12}) \[[0-9:]{4,12}<")
_COUNTER = re.compile(r"\b(?P<kind>step|iter|iteration|global_step|epoch|batch)\b[ :=#\[]{0,3}(?P<n>[0-9]{1,12})\b",
                      re.IGNORECASE)
_LOSS = re.compile(r"\b(?:loss|train_loss)['\"]?\s?[:=]?\s?[-+]?(?:[0-9]|nan|inf)", re.IGNORECASE)

# Words trainers print when they are done (HF Trainer's metrics dict and its log_metrics table
# "  train_runtime            = 0:15:19.02", Lightning, plain loops, the wrappers that print an
# exit status).
FINISHED = re.compile(
    r"\b(?:training|train|fit|fitting|run|job|finetuning|fine-tuning|pretraining)\b[^\n]{0,40}?"
    r"\b(?:complete|completed|finished|done|succeeded|ended successfully)\b"
    r"|Training completed\b|['\"]train_runtime['\"]|\btrain_runtime\s+=\s|`Trainer\.fit` stopped: `max_(?:epochs|steps)=[0-9]+` reached"
    r"|\bexit(?:ed with)? (?:status|code):? 0\b"
    r"|\bProcess [0-9]+ exits successfully\b|\bEnd of training\b|\btraining (?:is )?(?:done|over)\b"
    r"|\bstep[: ]\s*([0-9]+)\s*/\s*\1\b(?!.*\b(?:of|/)\s*[0-9])",
    re.IGNORECASE | re.MULTILINE,
)


def is_trailer_line(body: str) -> bool:
    """A line a library prints at every exit, whatever the run did: wandb's console footer (its run
    history and summary, "Synced 5 W&B file(s)", "View run at"). It says nothing of how the run
    ended: not progress ("wandb:       step 4"), not the trainer's words for done, not an error."""
    return body.lstrip().startswith(_TRAILER_START)


_TRAILER_START = "wandb:"


def is_own_line(line: str) -> bool:
    """A non-blank line the run printed itself: what the readers of a log's last lines (its
    error, its words for done, where it stopped) look at, not a library's exit trailer."""
    return bool(line.strip()) and not is_trailer_line(strip_prefix(line))


def progress_of(body: str) -> tuple[str, str] | None:
    """(kind, counter) of a progress line, or None: ("tqdm", "5/20"), ("count", "epoch 0 step 12"), or
    ("loss", the line) for a loss line without a counter. `body` is the line without prefixes."""
    if len(body) > 4096:
        body = body[:4096]
    if is_trailer_line(body):
        return None
    # Each search only where its literal is: most lines of a log hold none of them.
    match = _TQDM.search(body) if " [" in body and "/" in body else None
    if match:
        return "tqdm", f"{match.group('n')}/{match.group('total')}"
    if any(word in body for word in _COUNTER_WORDS):
        counters = [f"{m.group('kind').lower()} {m.group('n')}" for _, m in zip(range(4), _COUNTER.finditer(body), strict=False)]
        if counters:
            return "count", " ".join(counters)  # "epoch 0 step 3": each counter of the line
    if ("oss" in body or "OSS" in body) and _LOSS.search(body):
        return "loss", body.strip()
    return None


# Pieces every counter word holds, in the cases logs write them ("step", "Step", "STEP", "Epoch").
_COUNTER_WORDS = ("tep", "TEP", "ter", "TER", "poch", "POCH", "atch", "ATCH")
# Pieces every finishing phrase holds, in either case.
_FINISH_WORDS = ("omplete", "OMPLETE", "inish", "INISH", "one", "ONE", "ucceed", "UCCEED", "nded", "NDED", "untime", "xit",
                 "XIT", "ynced", "Trainer.fit", "uccessfully", "nd of training", "over", "tep")


def is_finish_line(body: str) -> bool:
    body = body[:4096]
    return (any(word in body for word in _FINISH_WORDS) and not is_trailer_line(body)
            and FINISHED.search(body) is not None)
