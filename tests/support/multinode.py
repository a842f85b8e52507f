"""A real 2-rank torch.distributed run (gloo, CPU) split across two "nodes" (folders of this
machine), for the multi-node tests: rank 0 on node-a, rank 1 on node-b; rank 1 raises a
ValueError at step 5, rank 0 then fails in its all_reduce ("Connection closed by peer").
node-b's rank runs under faketime five minutes ahead (a node whose clock is off). The torch
program needs its own venv (.torchvenv, made by .ci/run); faketime is Debian's package.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.paths import REPO

TORCH_PY = REPO / ".torchvenv" / "bin" / "python"
TRAIN = REPO / "tests" / "data" / "multinode" / "train_gloo.py"
SKEW = 300.0  # node-b's clock, seconds ahead
RUN = "mnrun"
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def torch_reason() -> str | None:
    """Why the real run cannot be made here (None: it can)."""
    if not TORCH_PY.exists():
        return f"needs torch in {TORCH_PY.parent.parent} (python3 -m venv .torchvenv && .torchvenv/bin/pip install torch==2.13.0)"
    if shutil.which("faketime") is None or not FAKETIME_LIB.exists():
        return "needs the faketime program (apt-get install faketime) to run node-b's rank with a clock off by minutes"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_gloo_cluster(base: Path) -> dict[str, Path]:
    """Run the job; each node's folder holds job/mnrun_rank<R>.log afterwards."""
    roots = {"node-a": base / "a", "node-b": base / "b"}
    for root in roots.values():
        (root / "job").mkdir(parents=True)
    port = str(_free_port())
    procs = []
    for rank, (name, root) in enumerate(roots.items()):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_PORT": port, "NODE": name, "FAIL_RANK": "1",
               "FAIL_STEP": "5", "PG_TIMEOUT": "20", "PYTHONUNBUFFERED": "1"}
        argv = [str(TORCH_PY), str(TRAIN)]
        if name == "node-b":
            argv = ["faketime", "-f", f"+{SKEW:.0f}s", *argv]
        log = open(root / "job" / f"{RUN}_rank{rank}.log", "wb")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(argv, cwd=root / "job", env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True), log))
    try:
        for proc, _log in procs:
            proc.wait(timeout=120)
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()
    return roots
