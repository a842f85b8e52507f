"""Benchmark logs made of real training output only (issue 23).

The files of bench/data/real/ are logs that people committed to public repositories
(bench/data/real/SOURCES.md gives each one's repository, path and commit), with one real run of
our own (bench/data/ddp-gradnorm-cpu.log: torchrun's `[rankN]:step S loss L grad_norm G` lines). Nothing here writes a
line of its own; every log below is those files' lines, in their order, repeated to a size:

- `real`: the runs that did not end in a crash, each file whole, one after another, round and
  round, then a real CUDA out-of-memory crash captured on an H200 (fixtures/cuda-oom-h200). What
  a long healthy run's log looks like, of every framework here, with its error at the end.
- `metrics`: only their metric lines (a line that prints a loss, a grad norm or a learning rate
  with a number: HF Trainer dicts, Megatron iteration lines, DeepSpeed step lines, llm.c,
  fairseq JSON, JAX, verl ...): the adversarial log, every line a candidate for a metric rule.
- `plain`: only their other lines (banners, NCCL INFO, warnings, progress bars, configs): the
  same output with no metric line, the baseline of `metrics`.
Each ends with the same real crash, so each scan has the same cause to find.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
REAL = DATA / "real"
CRASH = Path(__file__).resolve().parent.parent / "fixtures" / "cuda-oom-h200" / "logs" / "train.log"
VERSION = 2  # bump when the assembled content changes, so cached logs are made again
KINDS = ("real", "metrics", "plain")

# Files whose run ended in its own crash or kill: left out, so the one crash is the one at the end.
_ENDS_IN_A_CRASH = ("fairseq-hydra-wav2vec2-crash-enospc.log", "verl-grpo-ray-qwen2.5-crash-end.log",
                    "megatron-deepspeed-moe-gpt3-125m.log", "jax-openpi-pi0-aloha-slurm.log",
                    "nccl-megatron-ds-zero-gpt2-n16.log", "slurm-megatron-gpt2-tp4-pp4-n4.log")
# A metric's name next to a number, as the frameworks of bench/data/real print them.
METRIC = re.compile(
    rb"(?i)(?:\bloss|grad[ _]?norm|\bgnorm|\bnorm|learning[ _]rate|\blr)['\"]?\s*[:=]?\s*['\"]?\[?[-+]?\d")


def sources() -> list[Path]:
    # With one capture of our own (bench/data/README.md): torchrun's [rankN]: step lines with a grad norm.
    return [*sorted(p for p in REAL.glob("*.log") if p.name not in _ENDS_IN_A_CRASH), DATA / "ddp-gradnorm-cpu.log"]


def _lines(kind: str, limit: int | None = None) -> list[bytes]:
    """`real`: every source file whole. `metrics`, `plain`: the chosen lines of the source files
    taken in turn, a line of each file after the other (a short file's lines start again), so
    every framework's shape weighs the same whatever the size of its file. Each line keeps its
    own ending ('\\n', or '\\r' for a progress bar's update). `limit`: about that many lines at most."""
    per_file: list[list[bytes]] = []
    for path in sources():
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            data += b"\n"  # a file without a final newline would run into the next one
        if kind == "real":
            per_file.append([data])
            continue
        picked = [line for line in data.splitlines(keepends=True)
                  if (METRIC.search(line) is not None) == (kind == "metrics")]
        if picked:
            per_file.append(picked)
    if kind == "real":
        return [data for (data,) in per_file]
    longest = max(len(lines) for lines in per_file)
    if limit is not None:  # the first `limit` lines of the round, every file's shapes among them
        longest = min(longest, -(-limit // len(per_file)))
    return [lines[n % len(lines)] for n in range(longest) for lines in per_file]


def blocks(kind: str, size: int) -> Iterator[bytes]:
    """The log's bytes: the chosen lines round and round until `size` less the crash, then the crash."""
    if kind not in KINDS:
        raise ValueError(f"unknown log kind {kind!r}")
    crash = CRASH.read_bytes()
    body = b"".join(_lines(kind))
    left = max(0, size - len(crash))
    while left >= len(body):
        yield body
        left -= len(body)
    if left:
        cut = body.rfind(b"\n", 0, left) + 1  # whole lines only
        yield body[:cut]
    yield crash


def generate(path: Path, kind: str, size: int) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        for block in blocks(kind, size):
            handle.write(block)
    partial.replace(path)


def log_path(work: Path, kind: str, size_mb: int) -> Path:
    return work / f"real-v{VERSION}-{kind}-{size_mb}MiB.log"


if __name__ == "__main__":
    import sys

    for kind in KINDS:
        lines = _lines(kind)
        print(f"{kind}: {sum(len(x) for x in lines):,} bytes of source lines", file=sys.stderr)
