"""Generate a large, realistic training log for the scan benchmark.

Every shape is taken from real captured output (bench/data/README.md says where each file
came from): the torchrun banner, NCCL INFO init blocks and Python warnings are replayed
verbatim from a real 2-GPU DDP run; loss lines repeat that run's `[rankN]:<timestamp> INFO
train: epoch E step S loss L lr R` shape for 8 ranks with fresh numbers; the tqdm bar is
written with raw '\\r' updates as tqdm does into a redirected file (healthy-torchrun-plain.log),
so rank lines continue on the bar's physical line just as in that capture. One early and one
late real crash log are inserted verbatim. Output is deterministic for a given size and seed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
VERSION = 1  # bump when the generated content changes, so cached logs are regenerated
WORLD = 8
TOTAL_STEPS = 5000  # steps per tqdm bar (one bar per epoch)
RESTART_BYTES = 96 * 1024 * 1024  # a torchrun restart (banner, NCCL init, warnings) this often
_BAR = " ▏▎▍▌▋▊▉█"


def _blocks() -> tuple[list[str], list[str], list[str], str, str]:
    healthy = (DATA / "ddp-healthy-train.log").read_text(encoding="utf-8").splitlines()
    banner = healthy[:4]
    nccl = [line for line in healthy if " NCCL INFO " in line and "Destroy" not in line and "Closing" not in line]
    warnings: list[str] = []
    for index, line in enumerate(healthy):
        if "Warning: " in line:
            warnings.extend(healthy[index : index + 2])  # the warning and the source line Python prints under it
    early = (DATA / "early-error-fx-trace-race.log").read_text(encoding="utf-8")
    late = (DATA / "late-error-dataloader-worker-oom.log").read_text(encoding="utf-8")
    return banner, nccl, warnings, early, late


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _bar(n: int, total: int, elapsed: float, rate: float) -> str:
    # The layout tqdm 4.70 wrote in the capture: "train:  45%|████▌     | 9/20 [00:01<00:02,  4.75it/s]"
    frac = n / total
    eighths = int(frac * 10 * 8)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (_BAR[part] if full < 10 else "")
    remaining = (total - n) / rate if rate else 0.0
    return f"\rtrain: {int(frac * 100):3d}%|{bar:<10}| {n}/{total} [{_clock(elapsed)}<{_clock(remaining)}, {rate:5.2f}it/s]"


def generate(path: Path, size: int, seed: int = 6, only_rank: int | None = None) -> None:
    """Write about `size` bytes of training log to `path` (atomically). With `only_rank`, the
    log of one rank as torchrun's --log-dir keeps it: that rank's lines, the bar on rank 0 only."""
    banner, nccl, warnings, early, late = _blocks()
    rng = random.Random(seed)
    tmp = path.with_name(path.name + ".tmp")
    written = 0
    early_at, late_at = int(size * 0.03), int(size * 0.99)
    early_done = late_done = False
    next_restart = 0
    with open(tmp, "w", encoding="utf-8", newline="") as out:
        for piece in _pieces(rng, banner, nccl, warnings, only_rank):
            if written >= next_restart:
                restart = ("\n" if written else "") + "\n".join(banner + nccl + warnings) + "\n"
                out.write(restart)
                written += len(restart.encode())
                next_restart += RESTART_BYTES
            if not early_done and written >= early_at:
                out.write(early)
                written += len(early.encode())
                early_done = True
            if not late_done and written >= late_at:
                out.write(late)
                written += len(late.encode())
                late_done = True
                break
            out.write(piece)
            written += len(piece.encode())
    tmp.replace(path)


def _pieces(rng: random.Random, banner: list[str], nccl: list[str], warnings: list[str],
            only_rank: int | None = None) -> Iterator[str]:
    """Batches of about 1 MB of steps."""
    start = time.mktime((2026, 11, 30, 4, 53, 54, 0, 0, -1))
    step = 0
    now = start
    stamp_second = -1
    stamp = ""
    losses = [2.33 + rng.random() * 0.05 for _ in range(WORLD)]
    lr = 1.0e-3
    while True:
        parts: list[str] = []
        size = 0
        while size < 1_000_000:
            epoch, n = divmod(step, TOTAL_STEPS)
            if n == 0 and step:
                lr *= 0.5
                parts.append("\n")
                parts.extend(line + "\n" for line in warnings[-4:])  # the lr_scheduler warning, per epoch
            now += 0.0128 + rng.random() * 0.0004
            elapsed = (n + 1) * 0.0128
            for _ in range(1 + (step % 3 == 0) if only_rank in (None, 0) else 0):  # tqdm refreshes 1-2 times a step
                text = _bar(n + 1, TOTAL_STEPS, elapsed, 77.0 + rng.random() * 2)
                parts.append(text)
                size += len(text) + 10
            if step % 2 == 0:
                if int(now) != stamp_second:
                    stamp_second = int(now)
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp_second))
                millis = int((now - stamp_second) * 1000)
                for rank in rng.sample(range(WORLD), WORLD) if only_rank is None else (only_rank,):
                    losses[rank] = max(0.05, losses[rank] * 0.99995 + (rng.random() - 0.5) * 0.02)
                    line = (f"[rank{rank}]:{stamp},{millis:03d} INFO train: epoch {epoch + 1} step {step} "
                            f"loss {losses[rank]:.4f} lr {lr:.2e}\n")
                    parts.append(line)
                    size += len(line)
            step += 1
        yield "".join(parts)


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    generate(Path(sys.argv[1]), int(float(sys.argv[2]) * 1024 * 1024))
