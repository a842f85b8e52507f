"""`diagnose scan -` reads standard input (`ssh host cat train.log | diagnose scan -`): the same
causes, on the same lines, as scanning the file; shown as <stdin>; `-` once; binary refused."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import FIXTURES, REPO


def scan(args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "diagnose", "scan", *args], input=data, capture_output=True, timeout=120,
                          cwd=REPO)


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
