"""The checkpoint directory: how many files, the newest and its age, zero-byte files, files an
interrupted save leaves (*.tmp, *.partial, *.incomplete), free space on its filesystem.

Only stats, never reads: a checkpoint tree of terabytes costs one walk.
"""

from __future__ import annotations

import os
import re
import time

from diagnose.evidence.model import CheckpointFile, CheckpointState
from diagnose.live.collectors.base import Context, Output

MAX_FILES = 200_000
_PARTIAL = re.compile(r"\.(tmp|temp|partial|incomplete|part|inprogress)$|\.tmp[.-]|^tmp[^/]*\.(pt|pth|bin|safetensors|ckpt)$",
                      re.IGNORECASE)


def is_partial(name: str) -> bool:
    return bool(_PARTIAL.search(name))


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    host = ctx.host
    if spec.checkpoint_dir is None:
        return Output(status="skipped", reason="no checkpoint directory is known (set checkpoints in diagnose.toml)")
    directory = spec.checkpoint_dir
    now = time.time()
    try:
        st = host.stat(directory)
    except PermissionError:
        return Output(status="gap", reason=f"{directory}: permission denied")
    if st is None or not st.is_dir:
        state = CheckpointState(directory, False, now, free_bytes=host.free_bytes(directory))
        return Output(facts={"checkpoints": state.to_json()})
    count = total = 0
    newest: CheckpointFile | None = None
    zero: list[str] = []
    partial: list[str] = []
    truncated = False
    for path, info in host.walk(directory, MAX_FILES):
        if ctx.remaining() <= 0:
            truncated = True
            break
        relative = os.path.relpath(path, directory)
        count += 1
        total += info.size
        if newest is None or info.mtime > newest.mtime:
            newest = CheckpointFile(relative, info.size, info.mtime)
        if info.size == 0:
            zero.append(relative)
        if is_partial(os.path.basename(relative)):
            partial.append(relative)
    state = CheckpointState(directory, True, now, count, total, newest, tuple(sorted(zero)[:50]), tuple(sorted(partial)[:50]),
                            host.free_bytes(directory))
    out = Output(facts={"checkpoints": state.to_json()})
    if truncated or count >= MAX_FILES:
        out.notes.append(f"checkpoint walk stopped after {count} files in {directory}")
    return out
