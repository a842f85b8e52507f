"""Checked and clean: what was looked at and found fine, with its window. Negative evidence is
evidence: a kernel log that covered the run and holds no OOM kill of its processes counts
against OOM, and saying so is what keeps an engineer from chasing the feared cause first."""

from __future__ import annotations

import time
from collections.abc import Sequence

from diagnose.engine.attribution import OWN, attribute
from diagnose.engine.findings import Check
from diagnose.engine.kernel_events import KernelEvent
from diagnose.engine.runview import RunView
from diagnose.evidence.model import Evidence, TextKind
from diagnose.rules.conditions import human_bytes


def _clock(moment: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment)) if moment is not None else "?"


def checks(evidence: Evidence, view: RunView, events: Sequence[KernelEvent]) -> list[Check]:
    found: list[Check] = []
    kernel = evidence.texts_of(TextKind.DMESG)
    if kernel and not any(g.source == "dmesg" for g in evidence.gaps):
        own = [e for e in events if attribute(e, view).verdict == OWN]
        where = ", ".join(t.display for t in kernel)
        span = f" between {_clock(view.start)} and {_clock(view.last_write)}" if view.start or view.last_write else ""
        others = [e for e in events if e.kind == "oom_kill" and e not in own]
        aside = f" ({len(others)} OOM kill(s) of other processes, not the run's)" if others else ""
        if not any(e.kind == "oom_kill" for e in own):
            found.append(Check("oom", "clean", f"no OOM kill of the run's processes in {where}{span}{aside}"))
        if not any(e.kind == "xid" for e in own):
            found.append(Check("xid", "clean", f"no GPU Xid error of the run's processes in {where}{span}"))
        if not any(e.kind == "segfault" for e in own):
            found.append(Check("segfault", "clean", f"no segfault of the run's processes in {where}{span}"))
    gpu = evidence.gpu
    if gpu is not None and gpu.gpus:
        bad = [g for g in gpu.gpus if (g.ecc_uncorrected or 0) > 0 or g.remapped_rows_failure or g.retired_pages_pending]
        if not bad:
            names = sorted({g.name or "GPU" for g in gpu.gpus})
            found.append(Check("gpu", "clean", f"{len(gpu.gpus)} GPU(s) ({', '.join(names)}): no uncorrected ECC errors, "
                                               f"no pending page retirement or row remap failure ({gpu.source})"))
    if gpu is not None and view.pids:
        used = [(g.index, proc.pid, proc.used_mib) for g in gpu.gpus for proc in g.processes if proc.pid in view.pids]
        if used:
            where = ", ".join(f"pid {pid} on GPU {index}" + (f" ({mib:.0f} MiB)" if mib is not None else "")
                              for index, pid, mib in used[:8])
            found.append(Check("gpu", "note", f"the run's processes hold GPU memory: {where}"))
    ckpt = evidence.checkpoints
    if ckpt is not None and ckpt.exists:
        if ckpt.free_bytes is not None:
            found.append(Check("disk", "clean" if ckpt.free_bytes > 1 << 30 else "note",
                               f"{human_bytes(ckpt.free_bytes)} free on the filesystem of {ckpt.directory}"))
        if ckpt.file_count == 0:
            found.append(Check("checkpoints", "note", f"checkpoint dir {ckpt.directory} is empty: the run died before "
                                                      "its first save"))
        elif ckpt.newest is not None:
            found.append(Check("checkpoints", "clean", f"{ckpt.file_count} checkpoint file(s) in {ckpt.directory}, newest "
                                                       f"{ckpt.newest.path} at {_clock(ckpt.newest.mtime)}"))
    tmux = evidence.tmux
    if tmux is not None and tmux.server.value == "running":
        found.append(Check("tmux", "clean", f"tmux server on {tmux.socket_path} is running"))
    if evidence.packages is not None and evidence.packages.versions:
        found.append(Check("packages", "clean", f"{len(evidence.packages.versions)} installed package versions read "
                                                f"({evidence.packages.source})"))
    return found
