"""Real child processes for identity tests: each started with a given cwd, environment or open
log, and always killed (with its group) at teardown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from diagnose.evidence.facts import RunIdentity
from diagnose.live.collectors.run import Collection
from tests.support.live import collect, empty_config


class Children:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.extra: list[int] = []  # pids that left our tree (reparented)

    def start(self, argv: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None,
              stdout: object = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        full = dict(os.environ)
        full.update(env or {})
        proc = subprocess.Popen(list(argv), cwd=cwd, env=full, stdout=stdout, stderr=subprocess.DEVNULL,  # type: ignore[arg-type]
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def python(self, code: str, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
        return self.start([sys.executable, "-c", code, *args], **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for pid in self.extra:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def identity_of(collection: Collection) -> RunIdentity:
    assert collection.manifest.identity is not None
    return RunIdentity.from_json(collection.manifest.identity)


def collect_processes(run_id: str, dirs: list[Path]) -> Collection:
    return collect(run_id, empty_config(), dirs, only=("process", "logs"))
