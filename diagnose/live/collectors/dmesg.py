"""Kernel log lines within the run's time window: `dmesg`, else `journalctl -k`, else the
syslog files (/var/log/kern.log, /var/log/messages). For a run that ended before the machine
last booted, `journalctl -k -b -1` (the ring buffer starts afresh at boot).

dmesg stamps lines with seconds since boot; the boot time (btime in /proc/stat) goes into the
manifest so the scanner and any later reader put them on the wall clock. A dmesg that is not
allowed to read the ring buffer (kernel.dmesg_restrict) falls through to the next source;
when none works the gap says why, e.g. "permission denied (dmesg: read kernel buffer failed:
Operation not permitted; ...)".
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from diagnose.evidence.lines import dmesg_seconds, kernel_time
from diagnose.evidence.model import FileKind
from diagnose.live.collectors.base import Captured, Context, Output
from diagnose.live.hosts import MAX_OUTPUT, CommandResult

KERN_LOG_TAIL = 64 * 1024 * 1024  # the end of a syslog file is where the run's lines are
_PERMISSION = re.compile(r"not permitted|permission denied|insufficient permissions", re.IGNORECASE)


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    host = ctx.host
    boot = host.boot_time()
    start, end = spec.time_window()
    if start is None and spec.tmux_session:
        start = _tmux_started(ctx)
    tried: list[str] = []
    denied = timed_out = False
    # A run that ended before the machine last booted (a GPU fault often ends in a reboot): the
    # ring buffer holds only this boot, the journal keeps the one before.
    before_boot = boot is not None and spec.last_activity is not None and spec.last_activity < boot

    if before_boot:
        tried.append("dmesg: the run ended before the last boot, the ring buffer only holds this boot")
    else:
        # The end of the ring buffer is the recent part: past the output limit its start goes.
        result = ctx.run(["dmesg"], cap=ctx.remaining() * 0.4, keep="tail")
        if result.ok and result.stdout.strip():
            kept, total = _window_dmesg(_whole_lines(result), boot, start, end)
            return _output(ctx, "dmesg", "kernel/dmesg.txt", kept, total, boot, start, end, result.truncated)
        tried.append(result.failure() if not result.ok else "dmesg printed nothing")
        denied |= bool(_PERMISSION.search(result.err)) or result.error == "permission denied"
        timed_out |= result.timed_out

    argv = ["journalctl", "-k", "--no-pager", "-q", "-o", "short-iso"] + (["-b", "-1"] if before_boot else [])
    if start is not None:
        argv += ["--since", f"@{int(start)}"]
    source = "journalctl -k" + (" -b -1" if before_boot else "")
    result = ctx.run(argv, cap=ctx.remaining() * 0.6, keep="tail")
    lines = [line for line in _whole_lines(result).splitlines(keepends=True) if line.strip() and not line.startswith(b"-- ")]
    if result.ok and lines:
        now = time.time()  # journalctl read now: its year-less times are at or before now
        kept, total = _window_clock(b"".join(lines), start, end, time.localtime(now).tm_year, now)
        return _output(ctx, source, "kernel/journalctl-k.txt", kept, total, boot, start, end, result.truncated)
    if result.ok:
        why = next((line.strip() for line in result.err.splitlines() if line.strip()), "") or "no entries"
        tried.append(f"{source}: {why}")
        denied |= bool(_PERMISSION.search(result.err))
    else:
        tried.append(result.failure())
        denied |= bool(_PERMISSION.search(result.err)) or result.error == "permission denied"
        timed_out |= result.timed_out

    for path in spec.kernel_logs:
        if ctx.remaining() <= 0:
            tried.append(f"{path}: no time left")
            timed_out = True
            break
        try:
            st = host.stat(path)
            if st is None:
                tried.append(f"{path}: not found")
                continue
            if host.local:
                data = host.read_bytes(path, KERN_LOG_TAIL, offset=-KERN_LOG_TAIL if st.size > KERN_LOG_TAIL else 0)
            else:
                data = _remote_kernel_lines(ctx, path)
        except PermissionError:
            tried.append(f"{path}: permission denied")
            denied = True
            continue
        except OSError as exc:
            tried.append(f"{path}: {exc.strerror or exc}")
            continue
        if st.size > KERN_LOG_TAIL:
            data = data[data.find(b"\n") + 1 :]  # the first line is cut
        data = b"".join(line for line in data.splitlines(keepends=True) if b" kernel: " in line)
        if data:
            kept, total = _window_clock(data, start, end, time.localtime(st.mtime).tm_year, st.mtime)
            return _output(ctx, path, "kernel/" + path.strip("/").replace("/", "_"), kept, total, boot, start, end)
        tried.append(f"{path}: no kernel lines")
    head = "permission denied" if denied else "timed out" if timed_out else "no kernel log available"
    out = Output(status="timeout" if timed_out and not denied else "gap", reason=f"{head} ({'; '.join(tried)})")
    out.run["boot_time"] = boot
    return out


def _remote_kernel_lines(ctx: Context, path: str) -> bytes:
    """The kernel lines of a syslog file's end, filtered where it is: only they cross the
    connection (the file's end is read there as here: its last KERN_LOG_TAIL bytes)."""
    result = ctx.run(["sh", "-c", 'tail -c "$1" -- "$2" | grep -a -F " kernel: "; exit 0', "sh", str(KERN_LOG_TAIL), path],
                     cap=ctx.remaining() * 0.5)
    if result.timed_out:
        raise OSError(f"reading it timed out after {result.seconds:.0f} s")
    if result.error:
        raise OSError(result.error)
    return result.stdout


def _tmux_started(ctx: Context) -> float | None:
    """When the run's tmux server made its socket: nothing in the kernel log before that can
    explain a launch in that server (used when the run left no timestamps at all)."""
    from diagnose.evidence.parsers.tmux import socket_path

    spec = ctx.spec
    path, _how = socket_path(ctx.host.uid(), ctx.host.environ(), spec.tmux_socket_name, spec.tmux_socket)
    try:
        st = ctx.host.stat(path)
    except PermissionError:
        return None
    return st.mtime - 2 if st is not None else None  # btime is whole seconds


def _whole_lines(result: CommandResult) -> bytes:
    """The output, without the partial first line a kept tail starts with."""
    data = result.stdout
    return data[data.find(b"\n") + 1 :] if result.truncated else data


def _output(ctx: Context, source: str, bundle_path: str, kept: bytes, total: int, boot: float | None,
            start: float | None, end: float | None, truncated: bool = False) -> Output:
    path = ctx.save(bundle_path.rsplit("/", 1)[-1], kept)
    out = Output()
    if truncated:
        out.notes.append(f"{source} printed more than {MAX_OUTPUT // (1024 * 1024)} MiB: only its last "
                         f"{MAX_OUTPUT // (1024 * 1024)} MiB (the most recent lines) were kept")
    out.files.append(Captured(FileKind.DMESG, bundle_path, path, source, None, None, len(kept)))
    out.run.update({
        "boot_time": boot,
        "dmesg_source": source,
        "dmesg_window": [start, end],
        "dmesg_lines": {"kept": kept.count(b"\n"), "read": total},
    })
    return out


def _window(data: bytes, start: float | None, end: float | None, moment: Callable[[str], float | None],
            head: int) -> tuple[bytes, int]:
    """The lines whose time (moment of the line's first `head` bytes) falls in the window;
    unstamped lines follow the line before. Returns (kept lines, lines read)."""
    lines = data.splitlines(keepends=True)
    if start is None and end is None:
        return data if data.endswith(b"\n") else data + b"\n", len(lines)
    kept: list[bytes] = []
    keep = True
    for line in lines:
        when = moment(line[:head].decode("utf-8", errors="replace"))
        if when is not None:
            keep = (start is None or when >= start) and (end is None or when <= end)
        if keep:
            kept.append(line if line.endswith(b"\n") else line + b"\n")
    return b"".join(kept), len(lines)


def _window_dmesg(data: bytes, boot: float | None, start: float | None, end: float | None) -> tuple[bytes, int]:
    """dmesg lines, placed by their [seconds since boot]; with no boot time, all of them."""
    if boot is None:
        return _window(data, None, None, lambda _line: None, 0)

    def moment(line: str) -> float | None:
        seconds = dmesg_seconds(line)
        return None if seconds is None else boot + seconds

    return _window(data, start, end, moment, 64)


def _window_clock(data: bytes, start: float | None, end: float | None, year: int,
                  not_after: float | None = None) -> tuple[bytes, int]:
    """syslog/journal lines, which carry wall-clock times without a year: the year of when the
    file was last written (or read), the year before for a date after that (New Year)."""
    return _window(data, start, end, lambda line: kernel_time(line, None, year, not_after), 80)
