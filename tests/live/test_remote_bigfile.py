"""A big remote log is searched where it lives: only the lines that may match (and its head and
tail) cross the connection, and the answer is the one a local scan gives there.

The log is written by streaming: a 16 MiB block of bench/loggen.py (the shapes of real captured
output: tqdm bars with raw '\\r', 8 ranks of loss lines, NCCL blocks, warnings, two real crashes)
over and over, then a real CUDA out-of-memory crash (fixtures/cuda-oom-h200) at its very end;
it is removed after. 200 MB in the normal suite, 2 GB marked slow (under 1 % of it may cross)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import FIXTURES, REPO
from tests.support.remote import INSIDE, diagnose_remote, diagnose_there, own_causes

BLOCK = 16 * 1024 * 1024


def write_log(path: Path, size: int) -> int:
    """`size` bytes of training log, streamed: a 16 MiB loggen block (with its two real crashes)
    written again and again, then the real crash at the very end."""
    import sys

    sys.path.insert(0, str(REPO))
    from bench.loggen import generate

    block = path.with_name("block.log")
    generate(block, BLOCK)
    data = block.read_bytes()
    block.unlink()
    crash = (FIXTURES / "cuda-oom-h200" / "logs" / "train.log").read_bytes()
    with open(path, "wb") as out:
        for _ in range(max(1, size // len(data))):
            out.write(data)
        out.write(crash)
    return path.stat().st_size


def big_log_story(tmp_path: Path, sshd: object, container: object, size: int) -> tuple[dict, dict, int]:
    log = container.workspace / "train_flex7.log"  # type: ignore[attr-defined]
    total = write_log(log, size)
    toml = tmp_path / "diagnose.toml"
    toml.write_text(sshd.toml(container.exec_prefix, f'[run]\ndir = "{INSIDE}"\n'))  # type: ignore[attr-defined]
    try:
        _code, live, _err = diagnose_remote(["flex7", "--config", str(toml)], cwd=tmp_path, timeout=600)
        _code, there, _err = diagnose_there(container, ["flex7", "--dir", INSIDE])  # type: ignore[arg-type]
    finally:
        log.unlink()
    return live, there, total


def from_the_log(data: dict) -> list[tuple[object, ...]]:
    """The causes resting on the log alone (this shared machine's kernel log changes between runs)."""
    return own_causes(data, f"{INSIDE}/train_flex7.log")


def assert_same_as_there(live: dict, there: dict, total: int) -> dict:
    oom = [c for c in live["causes"] if c["id"] == "memory.cuda-oom"]
    assert oom, [c["id"] for c in live["causes"]]
    lines = live["stats"]["collect"]["remote"]["files"][f"logs{INSIDE}/train_flex7.log"]["lines"]
    crash = (FIXTURES / "cuda-oom-h200" / "logs" / "train.log").read_bytes().count(b"\n")
    assert all(lines - crash < e["line"] <= lines for e in oom[0]["evidence"]), "the crash is at the log's end"
    assert from_the_log(live) == from_the_log(there)  # ids, titles, every evidence line number, text and time
    assert len(from_the_log(live)) >= 3  # the two crashes loggen plants and the one at the end
    assert live["stats"]["lines_scanned"] == there["stats"]["lines_scanned"]
    remote = live["stats"]["remote"]
    assert remote["bytes_read_remotely"] == total
    assert remote["search"].startswith("grep on the remote side")
    files = live["stats"]["collect"]["remote"]["files"]
    entry = files[f"logs{INSIDE}/train_flex7.log"]
    assert entry["mode"] == "grep" and entry["size"] == total and entry["candidates"] > 0
    return remote


def test_200_mb_remote_log_crash_at_the_end(tmp_path, sshd, container):
    live, there, total = big_log_story(tmp_path, sshd, container, 200 * 1024 * 1024)
    remote = assert_same_as_there(live, there, total)
    # The 5 MiB tail (for the crash finder) is most of what comes over; compressed it is ~0.3 %.
    assert remote["bytes_transferred"] < total * 0.01, remote


@pytest.mark.slow
def test_2_gb_remote_log_under_one_percent_crosses(tmp_path, sshd, container):
    live, there, total = big_log_story(tmp_path, sshd, container, 2 * 1024 * 1024 * 1024)
    remote = assert_same_as_there(live, there, total)
    assert remote["bytes_transferred"] < total * 0.01, remote
    assert remote["percent_transferred"] < 1.0


def test_a_300_mb_line_makes_grep_run_out_of_memory_then_lines_are_cut_first(tmp_path, sshd, container):
    """A progress bar that never printed a newline (tqdm's '\\r' updates, as in the real capture
    of bench/data/healthy-torchrun-plain.log) for 300 MB: the remote grep, held to 200 MB
    (DIAGNOSE_REMOTE_GREP_MEMORY_KB), runs out of memory on it; the search runs again with every
    line cut to 1 MiB first, and the crash after it is still found at its own line."""

    real = (REPO / "bench" / "data" / "healthy-torchrun-plain.log").read_bytes()
    start = real.index(b"\rtrain:   5%")
    updates = real[start : real.index(b"[rank1]", start)]  # two real bar updates, '\r' before each
    log = container.workspace / "train_flex7.log"
    with open(log, "wb") as out:
        out.write(real[: real.index(b"\rtrain:")])
        block = updates * ((1 << 20) // len(updates) + 1)
        for _ in range(300):
            out.write(block[: 1 << 20])
        out.write(b"\n")
        out.write((FIXTURES / "cuda-oom-h200" / "logs" / "train.log").read_bytes())
    toml = tmp_path / "diagnose.toml"
    toml.write_text(sshd.toml(container.exec_prefix, f'[run]\ndir = "{INSIDE}"\n'))
    from tests.support.cli import run_cli

    try:
        result = run_cli(["flex7", "--config", str(toml), "--format", "json"], cwd=tmp_path, timeout=600,
                         env={"DIAGNOSE_REMOTE_GREP_MEMORY_KB": str(200 * 1024)})
        _code, there, _err = diagnose_there(container, ["flex7", "--dir", INSIDE])
    finally:
        log.unlink()
    assert result.returncode in (0, 1), result.stderr
    import json

    live = json.loads(result.stdout)
    entry = live["stats"]["collect"]["remote"]["files"][f"logs{INSIDE}/train_flex7.log"]
    assert entry["mode"] == "grep, lines cut to 1024 KiB first", entry
    assert any("grep ran out of memory on a very long line" in note for note in live["notes"]), live["notes"]
    assert [c["id"] for c in live["causes"] if c["id"] == "memory.cuda-oom"]
    assert from_the_log(live) == from_the_log(there)
