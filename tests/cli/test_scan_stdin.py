"""`diagnose scan -` reads standard input (`ssh host cat train.log | diagnose scan -`): the same
causes, on the same lines, as scanning the file; shown as <stdin>; `-` once; binary refused.
Every test pipes real bytes (fixture files) into the real CLI, in a subprocess."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.paths import FIXTURES, REPO

DMESG = FIXTURES / "gpu-device-assert-live" / "kernel" / "dmesg.txt"  # an Xid 43 on line 374


def scan(args: list[str], data: bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "diagnose", "scan", *args], input=data, capture_output=True, timeout=120,
                          cwd=REPO, env=env)


def causes_of(report: bytes) -> list[tuple[str, list[tuple[str, int]]]]:
    return [(c["id"], [(e["source"], e["line"]) for e in c["evidence"]]) for c in json.loads(report)["causes"]]


def test_stdin_gives_the_file_answer() -> None:
    log = FIXTURES / "cuda-oom-h200" / "logs" / "train.log"
    piped = scan(["-", "--format", "json"], log.read_bytes())
    direct = scan([str(log), "--format", "json"], b"")
    assert piped.returncode == direct.returncode == 1, piped.stderr
    a, b = json.loads(piped.stdout), json.loads(direct.stdout)
    assert [(c["id"], [e["line"] for e in c["evidence"]]) for c in a["causes"]] == \
           [(c["id"], [e["line"] for e in c["evidence"]]) for c in b["causes"]]
    assert {e["source"] for c in a["causes"] for e in c["evidence"]} == {"<stdin>"}


def test_stdin_once_and_text_only() -> None:
    twice = scan(["-", "-"], b"x\n")
    assert twice.returncode == 2 and b"can be given only once" in twice.stderr
    binary = scan(["-"], b"\0" * 4096 + b"\x01\x02" * 100)
    assert binary.returncode == 2 and b"binary" in binary.stderr and binary.stderr.startswith(b"diagnose: error: -: ")
    forced = scan(["dmesg:-", "--format", "json"], (FIXTURES / "healthy-cpu-train" / "kernel" / "dmesg.txt").read_bytes())
    assert forced.returncode in (0, 1), forced.stderr


def test_shell_pipe_through_the_cli(tmp_path: Path) -> None:
    """`cat LOG | diagnose scan -` in a real shell pipeline: the file's answer, the run's input
    named <stdin> (never the temp copy's path), and the copy gone afterwards."""
    log = FIXTURES / "cuda-oom-h200" / "logs" / "train.log"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    diagnose = f"{shlex.quote(sys.executable)} -m diagnose scan"
    piped = subprocess.run(["sh", "-c", f"cat {shlex.quote(str(log))} | {diagnose} - --format json"], capture_output=True,
                           timeout=120, cwd=REPO, env=env)
    direct = scan([str(log), "--format", "json"], b"")
    assert piped.returncode == direct.returncode == 1, piped.stderr
    assert causes_of(piped.stdout) == [(cid, [("<stdin>", line) for _, line in ev]) for cid, ev in causes_of(direct.stdout)]
    assert json.loads(piped.stdout)["run"]["inputs"] == ["<stdin>"]
    terminal = subprocess.run(["sh", "-c", f"cat {shlex.quote(str(log))} | {diagnose} -"], capture_output=True, timeout=120,
                              cwd=REPO, env=env)
    assert terminal.returncode == 1 and b"<stdin>:" in terminal.stdout, terminal.stderr
    assert b"diagnose-stdin-" not in piped.stdout + terminal.stdout + piped.stderr + terminal.stderr
    assert list(scratch.iterdir()) == []  # the copies of standard input were removed


def test_kind_dash_forces_the_kind() -> None:
    """`dmesg:-` reads standard input as a kernel log, `log:-` the same bytes as a run's log (whose
    last line, here the Xid, is where it stopped)."""
    data = DMESG.read_bytes()
    as_kernel = scan(["dmesg:-", "--format", "json"], data)
    as_log = scan(["log:-", "--format", "json"], data)
    assert as_kernel.returncode == as_log.returncode == 0, as_kernel.stderr + as_log.stderr  # warnings only
    assert causes_of(as_kernel.stdout) == [("gpu.xid-application", [("<stdin>", 374)])]
    assert json.loads(as_kernel.stdout)["run"]["state_reason"] == "no log of the run to read"
    assert "run.stopped-without-error" not in [cid for cid, _ in causes_of(as_log.stdout)]  # scanned alone: no kill said
    assert json.loads(as_log.stdout)["run"]["state"] == "stopped"


def test_stdin_beside_files() -> None:
    """`-` among other paths: both scanned, each named as given."""
    log = FIXTURES / "cuda-oom-h200" / "logs" / "train.log"
    both = scan([str(log), "dmesg:-", "--format", "json"], DMESG.read_bytes())
    assert both.returncode == 1, both.stderr
    report = json.loads(both.stdout)
    assert report["run"]["inputs"] == [str(log), "<stdin>"]
    sources = {e["source"] for c in report["causes"] for e in c["evidence"]}
    assert "<stdin>" in sources and any(s.endswith("train.log") for s in sources)


def test_stdin_bad_input_is_one_line() -> None:
    """Empty standard input, and `notakind:-` (a file of that name, not standard input): exit 2,
    one line naming what was given, never the temp copy."""
    empty = scan(["-"], b"")
    assert (empty.returncode, empty.stderr) == (2, b"diagnose: error: -: standard input is empty, nothing to scan\n")
    other = scan(["notakind:-"], DMESG.read_bytes())
    assert (other.returncode, other.stderr) == (2, b"diagnose: error: notakind:-: no such file or directory\n")


def ranks_block(report: bytes) -> list[bytes]:
    lines = report.splitlines()
    start = lines.index(b"Ranks")
    return lines[start:lines.index(b"", start)]


def test_stdin_of_two_ranks_draws_their_timeline() -> None:
    """The Ranks table of a piped log (the run's timeline: built, for the terminal report, from a
    re-read of the logs) is the file's: standard input's copy is there while it is built."""
    log = FIXTURES / "nccl-hang-2gpu" / "logs" / "nccl-hang.log"
    piped = scan(["-"], log.read_bytes())
    direct = scan([str(log)], b"")
    assert piped.returncode == direct.returncode == 1, piped.stderr
    assert len(ranks_block(piped.stdout)) > 3 and ranks_block(piped.stdout) == ranks_block(direct.stdout)
