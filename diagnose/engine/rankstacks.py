"""Where each rank of a stalled multi-rank run waits, from its py-spy dump: inside a collective
(all_reduce, barrier, all_gather, ... in torch.distributed or DeepSpeed's comm), or outside it
in its own code (a data loader that never returns, a rank-only branch, a lock). When some ranks
wait in a collective and others are elsewhere, the others are the ones the collective waits
for: the hung ranks, named before any watchdog would fire.

py-spy prints each thread innermost frame first, one frame a line: `    func (path:line)`;
0.4 qualifies methods (`Class.method`, `f.<locals>.g`), 0.3 does not. Paths below site-packages
are printed relative to it (`torch/distributed/distributed_c10d.py`), the script's own as given.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

_THREAD = re.compile(r"^Thread (?:0x[0-9A-Fa-f]+|\d+) \((?P<status>[^)]*)\)(?::\s*\"(?P<name>.*)\")?\s*$")
_FRAME = re.compile(r"^\s+(?P<func>\S(?:.*\S)?) \((?P<path>[^()]+?):(?P<line>\d+)\)\s*$")
# The operations a rank blocks in while its peers have not arrived (Python-level names in
# torch.distributed, DeepSpeed's comm and ZeRO, and the Work handle's wait).
_COLLECTIVE_NAME = re.compile(
    r"^(?:all_?reduce\w*|all_?gather\w*|reduce_scatter\w*|broadcast\w*|(?:monitored_)?barrier|all_to_all\w*|"
    r"reduce|gather\w*|scatter\w*|i?send|i?recv|batch_isend_irecv|wait|_wait|wait_all)$")
_COLLECTIVE_HOME = ("torch/distributed/", "deepspeed/comm/", "deepspeed/runtime/zero/", "torch/nn/parallel/")
# Libraries a rank runs through on its way to (or inside) a wait; the innermost frame outside
# them and outside the standard library is the user's own code.
_LIBRARIES = frozenset({
    "torch", "deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning", "lightning_fabric",
    "numpy", "apex", "datasets", "tqdm", "wandb", "jax", "jaxlib", "flax", "ray", "triton", "tensorflow", "keras",
    "safetensors", "huggingface_hub", "peft", "trl", "torchvision", "torchaudio", "_pytest",
})


class Place(Enum):
    """Where a rank's main thread is."""

    COLLECTIVE = "collective"  # blocked in a collective or its Work.wait
    ELSEWHERE = "elsewhere"  # anywhere else: its own code, a data loader, a lock, I/O


@dataclass(frozen=True)
class Frame:
    func: str
    path: str
    line: int

    @property
    def short(self) -> str:
        """`func (path:line)` as py-spy printed it, 0.4's qualified name kept."""
        return f"{self.func} ({self.path}:{self.line})"

    @property
    def name(self) -> str:
        """The function's own name (`wrapper` of `_exception_logger.<locals>.wrapper`)."""
        return self.func.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Thread:
    name: str
    status: str  # py-spy's: idle, active, gil...
    frames: tuple[Frame, ...]  # innermost first


@dataclass(frozen=True)
class ProcessStack:
    """A py-spy dump of one process of the run, and the rank it is (None: not a rank's own process)."""

    pid: int
    rank: int | None
    dump: str


@dataclass(frozen=True)
class RankPlace:
    rank: int
    pid: int
    place: Place
    frame: Frame | None  # the collective's frame, or the innermost frame elsewhere
    own: Frame | None  # the innermost frame of the user's own code (None: none on the stack)

    def where(self) -> str:
        """`all_reduce`, or `next_batch (hang_gloo.py:27)` (with the caller in own code when the
        innermost frame is a library's)."""
        if self.place is Place.COLLECTIVE and self.frame is not None:
            return self.frame.name
        if self.frame is None:
            return "an unknown place (no Python frame)"
        if self.own is not None and self.own != self.frame:
            return f"{self.frame.short}, called from {self.own.short}"
        return self.frame.short


@dataclass(frozen=True)
class HangReading:
    """Ranks outside the collective that the others wait in."""

    outside: tuple[RankPlace, ...]
    waiting: tuple[RankPlace, ...]

    def summary(self) -> str:
        """`rank 1 is in next_batch (hang_gloo.py:27); rank 0 waits in all_reduce`."""
        parts = [f"{_ranks_word([p.rank])} is in {p.where()}" for p in self.outside]
        by_op: dict[str, list[int]] = {}
        for place in self.waiting:
            by_op.setdefault(place.where(), []).append(place.rank)
        waits = [f"{_ranks_word(ranks)} {'wait' if len(ranks) > 1 else 'waits'} in {op}" for op, ranks in by_op.items()]
        return "; ".join([*parts, *waits])


def parse_dump(text: str) -> tuple[Thread, ...]:
    """The threads of one `py-spy dump`, frames innermost first (lines that are neither a thread
    header nor a frame, such as --locals' variables, are skipped)."""
    threads: list[Thread] = []
    name = status = ""
    frames: list[Frame] = []
    started = False
    for line in text.splitlines():
        header = _THREAD.match(line)
        if header:
            if started:
                threads.append(Thread(name, status, tuple(frames)))
            name, status, frames, started = header.group("name") or "", header.group("status"), [], True
            continue
        frame = _FRAME.match(line)
        if frame and started:
            frames.append(Frame(frame.group("func"), frame.group("path"), int(frame.group("line"))))
    if started:
        threads.append(Thread(name, status, tuple(frames)))
    return tuple(threads)


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    """The thread named MainThread, else the first py-spy printed (the process's own)."""
    return next((t for t in threads if t.name == "MainThread"), threads[0] if threads else None)


def is_library(frame: Frame) -> bool:
    """A frame of a known library or the standard library (py-spy prints their paths relative
    to site-packages or the stdlib folder), or of the interpreter's own machinery."""
    if frame.path.startswith("<"):  # <frozen runpy>, <string>
        return frame.path != "<string>"
    if "site-packages/" in frame.path or "dist-packages/" in frame.path or "/lib/python3" in frame.path:
        return True
    head = frame.path.split("/", 1)[0]
    module = head[:-3] if head.endswith(".py") else head
    return module in _LIBRARIES or module in sys.stdlib_module_names


def _is_collective(frame: Frame) -> bool:
    return frame.path.startswith(_COLLECTIVE_HOME) and bool(_COLLECTIVE_NAME.match(frame.name))


def place_of(stack: ProcessStack, rank: int) -> RankPlace:
    """Where the rank's main thread is: in a collective if any of its frames is one (a wrapper or
    a Work.wait may sit inside it), else at its innermost frame."""
    thread = main_thread(parse_dump(stack.dump))
    frames = thread.frames if thread is not None else ()
    own = next((f for f in frames if not is_library(f)), None)
    collective = next((f for f in frames if _is_collective(f)), None)
    if collective is not None:
        return RankPlace(rank, stack.pid, Place.COLLECTIVE, collective, own)
    return RankPlace(rank, stack.pid, Place.ELSEWHERE, frames[0] if frames else None, own)


def read_hang(stacks: Iterable[ProcessStack]) -> HangReading | None:
    """The ranks outside the collective the others wait in; None unless at least one rank waits in
    a collective and at least one is elsewhere (all waiting: the missing peer is not among these
    ranks; none waiting: no collective to name)."""
    places = sorted((place_of(s, s.rank) for s in stacks if s.rank is not None), key=lambda p: p.rank)
    waiting = tuple(p for p in places if p.place is Place.COLLECTIVE)
    outside = tuple(p for p in places if p.place is Place.ELSEWHERE)
    if not waiting or not outside:
        return None
    return HangReading(outside, waiting)


def _ranks_word(ranks: Sequence[int]) -> str:
    """`rank 1`, `ranks 0, 2-7`."""
    ordered = sorted(set(ranks))
    if len(ordered) == 1:
        return f"rank {ordered[0]}"
    spans: list[str] = []
    start = prev = ordered[0]
    for rank in [*ordered[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return "ranks " + ", ".join(spans)
