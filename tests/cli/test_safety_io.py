"""Hostile inputs that used to hang or blow up memory: FIFOs given as logs, one enormous line
(plain and as a gz bomb), a command printing a gigabyte. Each runs in a subprocess with a
timeout, and the memory figure is the child's own peak RSS."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
PEAK_MB = 300
MARKER = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"

# Runs argv as a child and prints its exit status, output and peak RSS (ru_maxrss of children:
# this wrapper has no other child, so the figure is that process's own).
_MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    started = time.monotonic()
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(json.dumps({"rc": done.returncode, "out": done.stdout[-20000:], "err": done.stderr[-5000:],
                      "seconds": time.monotonic() - started,
                      "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
""")


def _measure(argv: list[str], cwd: Path, timeout: float) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    try:
        done = subprocess.run([sys.executable, "-c", _MEASURE, *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv)}: still running after {timeout} s")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _scan(args: list[str], cwd: Path, timeout: float = 30) -> dict[str, object]:
    return _measure([sys.executable, "-m", "diagnose", "scan", *args], cwd, timeout)


# ---------------------------------------------------------------- FIFOs


def test_fifo_named_on_the_command_line_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "train.log")
    result = _scan(["train.log"], tmp_path)
    assert result["rc"] == 2
    err = str(result["err"]).strip()
    assert err.splitlines() == ["diagnose: error: train.log: not a regular file (a FIFO), nothing to scan"]
    assert "Traceback" not in err


def test_fifo_forced_kind_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "k")
    result = _scan(["dmesg:k"], tmp_path)
    assert result["rc"] == 2 and "not a regular file (a FIFO)" in str(result["err"])


def test_fifo_inside_a_scanned_folder_is_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "rank1.log")
    (run / "rank0.log").write_bytes(b"step 1\n" + MARKER)
    result = _scan(["run", "-v"], tmp_path)
    assert result["rc"] in (0, 1), result["err"]
    assert "skipped run/rank1.log: not a regular file (a FIFO)" in str(result["out"])


def test_fifo_alone_in_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "train.log")
    result = _scan(["run"], tmp_path)
    assert result["rc"] == 2 and "nothing to scan" in str(result["err"]) and "not a regular file (a FIFO)" in str(result["err"])


def test_logs_collector_and_host_skip_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "train.log")
    code = textwrap.dedent(f"""
        from types import SimpleNamespace
        from diagnose.live.collectors.base import Output
        from diagnose.live.collectors.logs import _file
        from diagnose.live.hosts import LocalHost
        out = Output()
        assert _file(SimpleNamespace(host=LocalHost()), {str(tmp_path / 'train.log')!r}, None, out) is None
        print(out.notes)
        try:
            LocalHost().read_bytes({str(tmp_path / 'train.log')!r}, 100)
        except OSError as exc:
            print("refused:", exc.strerror)
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "not a regular file" in done.stdout and "refused: not a regular file" in done.stdout


# ---------------------------------------------------------------- one enormous line


def _one_line_file(path: Path, mib: int) -> None:
    """`mib` MiB of one line, then an error line: written a block at a time, never in memory."""
    block = b"a" * MiB
    with open(path, "wb") as handle:
        handle.write(b"step 1 loss 2.5\n")
        for _ in range(mib):
            handle.write(block)
        handle.write(b"\n" + MARKER)


def _check_long_line_scan(path: Path, timeout: float) -> dict[str, object]:
    try:
        result = _scan([path.name], path.parent, timeout)
    finally:
        path.unlink()
    out = str(result["out"])
    assert result["rc"] in (0, 1), result["err"]
    assert "1 line(s) longer than 64 KiB were cut" in out
    assert "illegal memory access" in out  # the line after the long one is still read
    assert float(str(result["peak_mb"])) < PEAK_MB, result
    print(f"{path.name}: {float(str(result['seconds'])):.1f} s, peak RSS {float(str(result['peak_mb'])):.0f} MB")
    return result


def test_200_mb_single_line_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    _one_line_file(tmp_path / "train.log", 200)
    _check_long_line_scan(tmp_path / "train.log", 120)


@pytest.mark.slow
def test_2_gb_single_line_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    _one_line_file(tmp_path / "train.log", 2048)
    _check_long_line_scan(tmp_path / "train.log", 600)


def _gz_bomb(path: Path, mib: int) -> None:
    """A .gz of one `mib` MiB line: the same 1 MiB member (~1 KiB compressed) written again
    and again (gzip readers join members), so building it costs almost nothing."""
    member = gzip.compress(b"a" * MiB, compresslevel=9)
    with open(path, "wb") as handle:
        handle.write(gzip.compress(b"step 1 loss 2.5\n"))
        for _ in range(mib):
            handle.write(member)
        handle.write(gzip.compress(b"\n" + MARKER))


def test_gz_bomb_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    _gz_bomb(tmp_path / "train.log.gz", 256)
    _check_long_line_scan(tmp_path / "train.log.gz", 120)


@pytest.mark.slow
def test_10_gb_gz_bomb_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    _gz_bomb(tmp_path / "train.log.gz", 10 * 1024)
    assert (tmp_path / "train.log.gz").stat().st_size < 16 * MiB
    _check_long_line_scan(tmp_path / "train.log.gz", 600)


def test_read_tail_cuts_a_long_line(tmp_path: Path) -> None:
    from diagnose.evidence.textio import MAX_LINE, read_tail

    path = tmp_path / "x.log"
    path.write_bytes(b"b" * (3 * MAX_LINE) + b"\nend\n")
    data, first = read_tail(path, 8 * MAX_LINE)
    assert data == b"b" * MAX_LINE + b"\nend\n" and first == 1


# ---------------------------------------------------------------- command output


_RUN = textwrap.dedent("""
    import json, resource, sys
    from diagnose.live.hosts import LocalHost, MAX_OUTPUT
    result = LocalHost().run(["sh", "-c", sys.argv[1]], 120, keep=sys.argv[2])
    print(json.dumps({"rc": result.rc, "size": len(result.stdout), "truncated": result.truncated,
                      "end": result.stdout[-4:].decode(), "start": result.stdout[:4].decode(),
                      "failure": result.failure(), "cap": MAX_OUTPUT,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def _run_command(shell: str, keep: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _RUN, shell, keep], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=180)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_gigabyte_of_output_keeps_the_tail_in_bounded_memory() -> None:
    result = _run_command("head -c 1G /dev/zero | tr '\\0' a; echo END", "tail")
    assert result["rc"] == 0 and result["truncated"] is True
    assert result["size"] == result["cap"] and result["end"] == "END\n"
    assert float(str(result["peak_mb"])) < PEAK_MB, result


def test_endless_output_is_stopped_at_the_cap_keeping_the_head() -> None:
    result = _run_command("echo BEGIN; yes", "head")
    assert result["truncated"] is True and result["size"] == result["cap"] and result["start"] == "BEGI"
    assert "printed more than 64 MiB and was stopped" in str(result["failure"])
    assert float(str(result["peak_mb"])) < PEAK_MB, result
