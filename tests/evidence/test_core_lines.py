"""evidence/lines.py is the one place for rank prefixes, ANSI escapes and glog headers: what it
answers on real lines, and that the modules that once had their own regexes agree with it."""

from __future__ import annotations

import re

from diagnose.engine.analyzers.runlog import LogLine
from diagnose.engine.tracebacks import crashes_in_text
from diagnose.evidence.lines import GLOG_HEADER, log_time, rank_of, strip_ansi, strip_prefix
from diagnose.ruletools.tools import pattern_from_line
from tests.support.paths import DATA, FIXTURES

GLOO = (FIXTURES / "gloo-timeout" / "logs" / "train.log").read_text().splitlines()
TEE = (FIXTURES / "seed-flex7-tmux-died" / "logs" / "train_flex6.log").read_text().splitlines()
# torch's C++ glog header behind torch's rank prefix (rules/distributed/distributed.hung-rank.yaml, a real 2xH200 run).
WATCHDOG = ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, "
            "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.")


def line(lines: list[str], start: str) -> str:
    return next(text for text in lines if text.startswith(start))


def test_rank_prefixes_of_torch_and_torchrun() -> None:
    assert strip_prefix(line(TEE, "[default0]:[rank0] init done")).startswith("init done: world_size=2")
    assert rank_of(line(TEE, "[default0]:[rank0] init done")) == 0
    rank, body = rank_of(line(GLOO, "[rank0]:   File ")), strip_prefix(line(GLOO, "[rank0]:   File "))
    assert rank == 0 and body.startswith("  File ")  # a frame keeps its indent: it is a frame
    traceback = line(GLOO, "[rank0]: Traceback")
    assert (rank_of(traceback), strip_prefix(traceback)) == (0, "Traceback (most recent call last):")
    assert strip_prefix(WATCHDOG).startswith("[E1206 18:44:12")
    unprefixed = line(GLOO, "W")  # torchrun's own glog lines have no rank prefix
    assert (rank_of(unprefixed), strip_prefix(unprefixed)) == (None, unprefixed)


def test_glog_headers_python_and_cpp() -> None:
    python = line(GLOO, "W1130 04:52:23.633000 20009 torch/distributed/run.py:874] Setting OMP_NUM_THREADS")
    assert GLOG_HEADER.sub("", python, count=1).startswith("Setting OMP_NUM_THREADS environment variable")
    assert GLOG_HEADER.sub("", strip_prefix(WATCHDOG), count=1).startswith("[Rank 0] Watchdog caught")
    assert log_time(WATCHDOG, 2026) is not None  # the time of a glog line behind a rank prefix


def test_ansi_text_and_bytes_strip_the_same() -> None:
    raw = (DATA / "scan" / "pip-download-tty.log").read_bytes()
    assert b"\x1b" in raw
    assert strip_ansi(raw.decode("utf-8", errors="replace")) == strip_ansi(raw).decode("utf-8", errors="replace")
    assert "\x1b" not in strip_ansi(raw.decode("utf-8", errors="replace"))
    assert strip_ansi(raw).count(b"\n") == raw.count(b"\n")  # never joins lines


def test_the_readers_of_lines_agree() -> None:
    # tracebacks (the unrecognised crash), runlog (the analyzers) and `rules new` all strip the same prefix.
    crashes = crashes_in_text("\n".join(GLOO))
    assert [c.exc_type for c in crashes if c.rank == 0] == ["RuntimeError"]  # its "[rank0]:" traceback
    assert LogLine("train.log", 1, line(TEE, "[default0]:[rank0] init done"), 0).body.startswith("init done")
    pattern = pattern_from_line(WATCHDOG)  # the prefix, glog header and torch's "[Rank 0]" left out
    assert pattern.startswith(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+")
    assert re.search(pattern, WATCHDOG)


def test_the_trainers_words_for_done_and_what_is_not() -> None:
    from diagnose.evidence.lines import is_finish_line, is_trailer_line, progress_of

    # HF Trainer's log_metrics table at the end of a run (bench/data/real/hf-trainer-deepspeed-gpt2-n4-slurm.log)
    assert is_finish_line("[INFO|trainer_pt_utils.py:912] 2021-05-25 06:53:45,862 >>   train_runtime            = 0:15:19.02")
    # wandb's footer, printed after crashes too (bench/data/real/nanochat-wandb-speedrun.log; the run history in
    # tests/data/shapes/wandb-footer-after-error.log)
    assert not is_finish_line("wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)")
    assert is_trailer_line("wandb:       step 4") and progress_of("wandb:       step 4") is None
    assert progress_of("2026-12-07 23:36:04,129 - finetune - INFO - step 4 loss 0.200") is not None
