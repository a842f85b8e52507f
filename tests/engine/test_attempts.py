"""torchrun with --max-restarts (a real run, tests/data/ranks/README.md): rank 1 raises the same
ValueError in all 3 attempts and torchrun's ChildFailedError ends the log. The worker's error is
the root, not the launcher's summary, and the report says every attempt ended with it."""

from __future__ import annotations

from pathlib import Path

from diagnose.engine.tracebacks import find_crashes
from tests.support.cli import run_cli

LOG = Path(__file__).resolve().parents[1] / "data" / "ranks" / "torchrun-max-restarts-valueerror.log"


def test_the_launchers_exception_does_not_hide_the_workers() -> None:
    crashes = find_crashes(LOG)
    assert [c.exc_type for c in crashes] == ["ValueError", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"]
    # torchrun's own "Sending process ... SIGTERM" line right after it is not part of its message.
    assert all("SIGTERM" not in text for _line, text in crashes[0].lines)


def test_every_attempt_died_the_same_way() -> None:
    import json

    result = run_cli(["scan", str(LOG), "--format", "json"])
    assert result.returncode == 1, result.stderr
    causes = json.loads(result.stdout)["causes"]
    top = causes[0]
    assert top["id"] == "unrecognised.crash" and "ValueError: bad batch at step 5" in top["title"]
    assert "all 3 attempts ended with this same error" in top["explanation"]
    child = next(c for c in causes if c["id"] == "distributed.child-failed")
    assert child["role"] == "symptom"
