"""The flight recorder's dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default /tmp/nccl_trace_rank_<rank>;
torch's FlightRecorder writes the same pickle for NCCL and gloo): per rank, the last collectives
each process group enqueued, started and completed, with the Python frames that called them.

A dump is a pickle, and a pickle can run code when loaded. It is never given to pickle.load: the
unpickler here refuses every global (find_class), so only plain data (dict, list, tuple, str,
bytes, int, float, bool, None) can come out, and the file is read only up to MAX_BYTES. What it
cannot read is a gap, never a crash.
"""

from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 64 << 20
_RANK = re.compile(r"(\d{1,9})(?:\.pkl|\.pickle)?$")


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight-recorder dump holds plain data only")


def load_data_only(data: bytes) -> Any:
    """Unpickle plain data; any class, function or reducer is refused (UnpicklingError)."""
    return _DataOnly(io.BytesIO(data)).load()


@dataclass(frozen=True)
class RankRecord:
    source: str
    rank: int | None
    enqueued: int | None  # last collective sequence number enqueued (default process group)
    completed: int | None
    last_op: str
    last_state: str
    caller: str


def _caller(entry: dict[str, Any]) -> str:
    """The first frame outside torch: the user's line that called the collective."""
    for frame in entry.get("frames") or ():
        if isinstance(frame, dict) and isinstance(frame.get("filename"), str):
            name = frame["filename"]
            if "/torch/" not in name and not name.startswith("<") and "/multiprocessing/" not in name:
                return f"{Path(name).name}:{frame.get('line')} ({frame.get('name')})"
    return ""


def read_flight_record(path: Path, display: str) -> tuple[list[str], str | None, RankRecord | None]:
    """(notes, gap reason or None, the rank's record) for one dump."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        return [], f"{display}: cannot read ({exc.strerror or exc})", None
    if len(data) > MAX_BYTES:
        return [], f"{display}: larger than {MAX_BYTES >> 20} MiB, not read", None
    try:
        dump = load_data_only(data)
    except Exception as exc:  # refused globals, a truncated or corrupt pickle, anything else: a gap
        return [], f"{display}: not a flight-recorder dump ({type(exc).__name__}: {exc})", None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return [], f"{display}: not a flight-recorder dump (no entries)", None
    match = _RANK.search(Path(display).name)
    rank = int(match.group(1)) if match else None
    status: dict[str, Any] = dump["pg_status"] if isinstance(dump.get("pg_status"), dict) else {}
    first = status.get("0", next(iter(status.values()), None) if status else None)
    default: dict[str, Any] = first if isinstance(first, dict) else {}
    entries = [e for e in dump["entries"] if isinstance(e, dict)]
    last = entries[-1] if entries else {}
    record = RankRecord(
        display, rank, _int(default.get("last_enqueued_collective")), _int(default.get("last_completed_collective")),
        str(last.get("profiling_name") or "?"), str(last.get("state") or "?"), _caller(last))
    said = (f"{display}: flight recorder (version {dump.get('version', '?')}) of rank {'?' if rank is None else rank}: "
            f"{len(entries)} collective(s); last enqueued #{record.enqueued}, last completed #{record.completed}; "
            f"last {record.last_op} ({record.last_state})" + (f" called from {record.caller}" if record.caller else ""))
    return [said], None, record


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def compare_ranks(records: list[RankRecord]) -> list[str]:
    """Which rank is behind: the ranks whose last enqueued collective is lower than the others'."""
    known = [r for r in records if r.enqueued is not None and r.rank is not None]
    if len(known) < 2:
        return []
    ahead = max(r.enqueued or 0 for r in known)
    behind = sorted((r for r in known if (r.enqueued or 0) < ahead), key=lambda r: r.rank or 0)
    if not behind:
        return []
    waiting = [r for r in known if r.enqueued == ahead]
    names = ", ".join(f"rank {r.rank} (at #{r.enqueued})" for r in behind)
    return [f"flight recorder: {names} never enqueued collective #{ahead} that "
            f"{', '.join(f'rank {r.rank}' for r in waiting)} wait(s) in ({waiting[0].last_op}): the rank(s) behind hang "
            "or took another code path"]
