"""Last exception per rank/thread, from real logs (interleaved thread tracebacks included)."""

from __future__ import annotations

from pathlib import Path

from diagnose.tracebacks import crashes_in_text, find_crashes
from tests.conftest import DATA


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


def test_rank_prefixes_and_chained_exceptions() -> None:
    text = "\n".join([
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 9, in step',
        "[rank1]:     load()",
        "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: 'shard-3.bin'",
        "[rank1]: ",
        "[rank1]: During handling of the above exception, another exception occurred:",
        "[rank1]: ",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 12, in <module>',
        "[rank1]:     main()",
        "[rank1]: RuntimeError: data loading failed",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 20, in <module>',
        "[rank0]: torch.distributed.DistBackendError: NCCL communicator was aborted",
    ])
    crashes = crashes_in_text(text)
    assert [(c.rank, c.summary) for c in crashes] == [
        (1, "RuntimeError: data loading failed"),
        (0, "torch.distributed.DistBackendError: NCCL communicator was aborted"),
    ]


def test_fatal_errors_without_traceback(tmp_path: Path) -> None:
    text = "step 10 loss 2.3\nFatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
    crashes = crashes_in_text(text)
    assert crashes and crashes[-1].fatal and crashes[-1].message == "Fatal Python error: Segmentation fault"


def test_warnings_are_not_crashes() -> None:
    text = "/x/site-packages/torch/utils/data.py:12: UserWarning: This DataLoader will create 4 worker processes\n  warnings.warn(\n"
    assert crashes_in_text(text) == []
