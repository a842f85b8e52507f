"""Last exception per rank/thread, from real logs (interleaved thread tracebacks included)."""

from __future__ import annotations

from diagnose.engine.tracebacks import find_crashes
from tests.support.paths import DATA, FIXTURES


def test_interleaved_thread_tracebacks_from_real_fx_race_log() -> None:
    crashes = find_crashes(DATA / "logs" / "fx-trace-race.log")
    by_thread = {c.thread: c for c in crashes}
    assert set(by_thread) == {"worker-0", "worker-1", "worker-2", "fx-tracer"}
    assert by_thread["worker-1"].exc_type == "RuntimeError"
    assert by_thread["worker-2"].message.startswith("Detected that you are using FX to symbolically trace")
    assert by_thread["fx-tracer"].summary == "AssertionError: Unexpected key inner@2, expected inner"
    assert by_thread["fx-tracer"].line_no == 345
    # evidence starts at the traceback header of that thread
    assert by_thread["fx-tracer"].lines[0][0] == 317


def test_dotted_exception_type_and_multiline_message() -> None:
    crashes = find_crashes(DATA / "logs" / "wandb-settings-rejected.log")
    assert len(crashes) == 1
    crash = crashes[0]
    assert crash.exc_type == "pydantic_core._pydantic_core.ValidationError"
    assert any("Extra inputs are not permitted" in text for _, text in crash.lines)


def test_rank_prefixes_from_a_real_torchrun_tee_log() -> None:
    # torch 2.13 torchrun --tee 3: lines carry "[defaultN]:[rankN]:"; rank 1 raised, rank 0 got gloo's error.
    crashes = find_crashes(FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log")
    by_rank = {c.rank: c for c in crashes if not c.fatal}
    assert by_rank[1].summary.startswith("ValueError: data check failed at step 5")
    assert by_rank[1].line_no == 21
    assert 0 in by_rank and by_rank[0].line_no > 21


def test_fatal_errors_without_traceback() -> None:
    crashes = find_crashes(DATA / "logs" / "segv-faulthandler.log")
    assert crashes and crashes[-1].fatal
    assert crashes[-1].message == "Fatal Python error: Segmentation fault" and crashes[-1].line_no == 5


def test_warnings_are_not_crashes() -> None:
    # A complete healthy run (torch 2.13 CPU) with real UserWarning/FutureWarning lines.
    assert find_crashes(FIXTURES / "healthy-cpu-train" / "logs" / "train.log") == []


def test_a_crash_has_the_time_of_the_newest_timed_line_up_to_it() -> None:
    # Times are read only when a crash asks for one: the answer is the eager one, every line's
    # time read in order (year-less glog times with the log's own year).
    from diagnose.engine.tracebacks import read_text
    from diagnose.evidence.lines import log_clock, log_time

    logs = [FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log", DATA / "shapes" / "ts-dataloader.log",
            DATA / "shapes" / "retried-io-errors.log", DATA / "logs" / "fx-trace-race.log"]
    timed = 0
    for log in logs:
        text = log.read_text(errors="replace")
        clock = log_clock("", text, log.stat().st_mtime)
        crashes = read_text(text, 1, None, clock).crashes
        assert crashes, log
        for crash in crashes:
            latest = None
            for line in text.split("\n")[: crash.line_no]:
                for segment in line.split("\r"):
                    moment = log_time(segment, clock.year, clock.not_after) if segment.strip() else None
                    latest = moment if moment is not None else latest
            assert crash.time == latest, (log.name, crash.line_no)
            timed += latest is not None
    assert timed >= 3


def test_a_dated_launcher_line_after_an_undated_exception_ends_its_message() -> None:
    """torchrun 2.1/2.2 writes "[2024-04-10 16:02:56,193] torch.distributed.elastic...: [WARNING]
    Sending process 270 closing signal SIGTERM" (lines from
    https://github.com/aws-samples/amazon-eks-machine-learning-with-terraform-and-kubeflow/issues/93)
    right under a worker's exception. Those lines are not the exception's message: a rule that
    matches them (SIGTERM to workers) must not make the worker's own error count as recognised.
    Under a log where every line is dated (moreutils ts), dated lines do go on with the message."""
    import subprocess
    import sys

    from diagnose.engine.tracebacks import crashes_in_text

    raised = subprocess.run([sys.executable, "-c", "raise ValueError('Target modules are missing\\nin the model')"],
                            capture_output=True, text=True, timeout=60).stderr
    launcher = ("[2024-04-10 16:02:56,193] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 270 closing signal SIGTERM\n"
                "[2024-04-10 16:02:56,193] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 271 closing signal SIGTERM\n")
    crash = crashes_in_text(raised + launcher)[0]
    assert crash.exc_type == "ValueError"
    assert [text for _no, text in crash.lines][-2:] == ["ValueError: Target modules are missing", "in the model"]
    assert not any("SIGTERM" in text for _no, text in crash.lines)

    dated = "".join(f"2024-04-10 16:02:55 {line}\n" for line in raised.splitlines())
    crash = crashes_in_text(dated)[0]
    assert crash.lines[-1][1] == "2024-04-10 16:02:55 in the model"
