"""Never silent: every error shape real logs print is read and reported by the fallback, with
its lines; the launchers' prefixes are see-through; an error the run went on after is not how
it ended; the user's own frame is named. The captures are in tests/data/shapes (README.md says
how each was produced); shapes not produced here are quoted from the public issues cited."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.engine.finders import PatternSet
from diagnose.engine.rank import UNRECOGNISED_ID, rank_all
from diagnose.engine.scan import Scanner
from diagnose.engine.tracebacks import crashes_in_text, find_crashes, read_crashes
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.evidence.lines import log_clock, log_time, split_prefix
from diagnose.evidence.model import TextFile, TextKind
from diagnose.rules.load import load_rules
from diagnose.rules.model import RuleSet
from diagnose.vocab import Severity
from tests.support.paths import FIXTURES
from tests.support.scan import ENGINES

SHAPES = Path(__file__).resolve().parents[1] / "data" / "shapes"
RULES = load_rules()
NO_RULES = RuleSet([])

# capture -> (shape, words of the error the fallback must report, a line its evidence must show)
CAPTURES = {
    "python-full.log": ("python", "JSONDecodeError: Expecting property name", "json.decoder.JSONDecodeError"),
    "python-last-line.log": ("bare", "JSONDecodeError: Expecting property name", "json.decoder.JSONDecodeError"),
    "ipython-script.log": ("ipython", "KeyError: 'label'", "KeyError: 'label'"),
    "ipython-interactive.log": ("ipython", "ZeroDivisionError: division by zero", "ZeroDivisionError: division by zero"),
    "ipython7-script.log": ("ipython", "KeyError: 'label'", "/tmp/ns-cap/ipy_cell.py in <listcomp>(.0)"),
    "ipython7-interactive.log": ("ipython", "ZeroDivisionError: division by zero", "<ipython-input-1-def7d6d68803> in f(x)"),
    "cpp-terminate.log": ("cpp", "std::runtime_error: shard index 7 out of range", "what():  shard index 7"),
    "glog-check-failed.log": ("glog", "Check failed: rank < world_size (3 vs. 2)", "Check failed: rank < world_size"),
    "faulthandler-segv.log": ("faulthandler", "Fatal Python error: Segmentation fault", "Fatal Python error: Segmentation fault"),
    "faulthandler-threads.log": ("faulthandler", "Fatal Python error: Segmentation fault", "Current thread 0x"),
    "jax-xla-runtime-error.log": ("python", "JaxRuntimeError: RESOURCE_EXHAUSTED", "jax.errors.JaxRuntimeError"),
    "jax-callback-error.log": ("python", "ValueError: INTERNAL: CpuCallback error", "IndexError: index 12 is out of bounds"),
    "rust-panic.log": ("rust", "called `Result::unwrap()` on an `Err` value: \"tokenizer.json: missing field `model`\"",
                       "thread 'main' (1532) panicked at src/main.rs:11:7:"),
    "rust-panic-backtrace.log": ("rust", "missing field `model`", "stack backtrace:"),
    "go-panic.log": ("go", "assignment to entry in nil map", "goroutine 1 [running]:"),
    "dataloader-keyerror.log": ("python", "KeyError: 'y'", "Caught KeyError in DataLoader worker process 0"),
    "tqdm-traceback.log": ("python", "OSError: [Errno 5] Input/output error", "Traceback (most recent call last):"),
    "torchrun-tee-collate.log": ("python", "invalid literal for int() with base 10: 'n/a'", "[default1]:[rank1]: ValueError"),
    "srun-label.log": ("python", "invalid literal for int() with base 10: 'n/a'", "1: [rank1]: ValueError"),
    "srun-label-dataloader.log": ("python", "KeyError: 'y'", "1: KeyError: 'y'"),
    "ts-dataloader.log": ("python", "KeyError: 'y'", "KeyError: 'y'"),
    "pdsh-hosts.log": ("python", "JSONDecodeError", "node02: json.decoder.JSONDecodeError"),
    "pdsh-workers-dataloader.log": ("python", "KeyError: 'y'", "worker-1: KeyError: 'y'"),
    "journald-dataloader.log": ("python", "KeyError: 'y'", "python[17722]: KeyError: 'y'"),
}


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_every_shape_is_read_as_the_logs_last_error(name: str) -> None:
    shape, words, _line = CAPTURES[name]
    crashes = find_crashes(SHAPES / name)
    assert crashes, f"{name}: no error found"
    # the last error of its rank (a multi-rank log ends in the other ranks' errors too)
    (crash,) = [c for c in crashes if words in c.summary or any(words in text for _no, text in c.lines)][-1:]
    assert crash.shape == shape
    assert not crash.survived, "the log ends in it"


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_the_fallback_reports_every_shape_with_its_lines(name: str) -> None:
    # No rule at all: nothing may pre-empt the fallback, which must still speak, at error.
    _shape, words, line = CAPTURES[name]
    evidence = evidence_from_paths([str(SHAPES / name)])
    ranked = rank_all([], evidence)
    fallback = [c for c in ranked.causes if c.id == UNRECOGNISED_ID]
    assert fallback, f"{name}: silent"
    assert all(c.severity == Severity.ERROR for c in fallback)
    assert any(words in c.title or words in c.explanation for c in fallback), [c.title for c in fallback]
    assert any(line in item.text for c in fallback for item in c.evidence), "the error's own lines are the evidence"
    assert ranked.state.state == "crashed"
    assert not [c for c in ranked.causes if c.id.startswith("run.")], "the state adds no second cause for the same crash"


# Logs that end in a line no crash shape covers, captured for real (README.md): the error line
# the run ends on is still how it ended.
LAST_WORDS = {  # log -> (its last error's words, the run's state)
    "exit-message.log": ("Training aborted: the dataloader produced no batches", "crashed"),
    "caught-repr.log": ("ZeroDivisionError('division by zero')", "crashed"),
    # the shell could not start the program: its log holds only the shell's error
    "shell-missing-binary.log": ("./build/train_cuda: No such file or directory", "never-started"),
}


@pytest.mark.parametrize("name", sorted(LAST_WORDS))
def test_a_log_ending_in_an_error_line_of_no_crash_shape_is_a_crash(name: str) -> None:
    assert not find_crashes(SHAPES / name)
    evidence = evidence_from_paths([str(SHAPES / name)])
    ranked = rank_all([], evidence)
    fallback = [c for c in ranked.causes if c.id == UNRECOGNISED_ID]
    assert fallback and fallback[0].severity == Severity.ERROR, name
    words, state = LAST_WORDS[name]
    assert any(words in item.text for item in fallback[0].evidence)
    assert ranked.state.state == state


def test_wandbs_footer_is_not_where_the_run_ended() -> None:
    """wandb prints its run history and summary at every exit (its "wandb:       step 4" is no
    progress, its "Synced 5 W&B file(s)" no finish: it prints them after crashes too): the run's
    own last line above the footer says how it ended."""
    failed = rank_all([], evidence_from_paths([str(SHAPES / "wandb-footer-after-error.log")]))
    assert failed.state.state == "crashed"
    fallback = [c for c in failed.causes if c.id == UNRECOGNISED_ID]
    assert fallback and fallback[0].severity == Severity.ERROR
    assert any("load failed: shard" in item.text for item in fallback[0].evidence)
    assert not any(item.text.startswith("wandb:") for item in failed.state.last_lines), "the run's own last lines"
    finished = rank_all([], evidence_from_paths([str(SHAPES / "wandb-footer-after-finish.log")]))
    assert finished.state.state == "finished" and not finished.causes


def test_a_bare_error_line_is_no_cause_where_a_rule_found_the_runs_error(tmp_path: Path) -> None:
    """A job script's own summary at the end of its .out ("ERROR: ... failed!", printed by real bash
    here) echoes the error a rule found in the .err (the NCCL watchdog of fixtures/nccl-hang-2gpu):
    it is no second, unrecognised cause that outranks it. Alone, it still is (never silent)."""
    import subprocess

    out = tmp_path / "job.out"
    script = 'echo "Training failed for run7"; echo "========"; echo "ERROR: synthesis experiment failed!"; echo "Exit code: 1"'
    out.write_text(subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60).stdout)
    err = tmp_path / "job.err"
    shutil.copy(FIXTURES / "nccl-hang-2gpu" / "logs" / "stderr.log", err)
    both = diagnose(evidence_from_paths([str(out), str(err)]), RULES).causes
    assert both and both[0].id.startswith("nccl."), [c.id for c in both]
    assert not [c for c in both if c.id == UNRECOGNISED_ID and any(i.source.endswith("job.out") for i in c.evidence)]
    alone = diagnose(evidence_from_paths([str(out)]), RULES).causes
    assert [c.id for c in alone][:1] == [UNRECOGNISED_ID]


@pytest.mark.parametrize(("name", "state"), [("pdb-eof.log", "crashed"), ("pdb-prompt.log", "stopped")])
def test_a_breakpoint_left_in_the_code_is_named(name: str, state: str) -> None:
    """pdb.set_trace() in a loop: under nohup it quits (bdb.BdbQuit ends the log: crashed); with
    stdin held open it waits at "(Pdb) " (the log just stops). Either way the breakpoint is the cause."""
    diagnosis = diagnose(evidence_from_paths([str(SHAPES / name)]), RULES)
    assert diagnosis.causes[0].id == "launch.debugger-breakpoint"
    assert any("pdb_left_in.py(9)<module>()" in item.text for item in diagnosis.causes[0].evidence)
    assert diagnosis.state == state


# Shapes quoted from public reports (never typed from memory):
CITED = {
    # https://github.com/huggingface/tokenizers/issues/821 (tokenizers' Rust panic through pyo3, older format)
    "tokenizers-panic": (
        ["thread '<unnamed>' panicked at 'called `Result::unwrap()` on an `Err` value: Internal', "
         "/__w/tokenizers/tokenizers/tokenizers/src/models/unigram/trainer.rs:203:53",
         "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
         "Preparing data...", "Training tokenizer...",
         "Traceback (most recent call last):",
         '  File "tokenization_2.py", line 26, in <module>',
         "    tokenizer.train([args.file], trainer)",
         "pyo3_runtime.PanicException: called `Result::unwrap()` on an `Err` value: Internal"],
        "pyo3_runtime.PanicException", "tokenization_2.py:26"),
    # https://github.com/mlc-ai/tokenizers-cpp/issues/53 (a panic that cannot unwind follows the first one)
    "rust-panic-in-panic": (
        ["thread '<unnamed>' panicked at src/lib.rs:26:50:",
         "called `Result::unwrap()` on an `Err` value: Error(\"data did not match any variant of untagged enum ModelWrapper\", line: 483534, column: 1)",
         "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"],
        "Rust panic", "lib.rs:26"),
    # https://github.com/jax-ml/jax/issues/20075 (jaxlib's XlaRuntimeError, its message wrapped over several lines)
    "xla-runtime-error-wrapped": (
        ['jaxlib.xla_extension.XlaRuntimeError: INTERNAL: All algorithms tried for %dot.128 = f32[384,384]{1,0} '
         'dot(f32[216000,384]{1,0} %multiply.51, f32[216000,384]{1,0} %sine.3), lhs_contracting_dims={0}, '
         'rhs_contracting_dims={0}, metadata={op_name="jit(train_step)/jit(main)/dot_general[dimension_numbers=(((1,), '
         '(0,)), ((), ())) precision=None preferred_element_type=float32]" source_file="./layers.py" source_line=160} '
         'failed. Falling back to default algorithm.  Per-algorithm errors:',
         "  Results do not match the reference. This is likely a bug/unexpected loss of precision.",
         "  ...",
         "  Results do not match the reference. This is likely a bug/unexpected loss of precision."],
        "jaxlib.xla_extension.XlaRuntimeError", None),
}


@pytest.mark.parametrize("name", sorted(CITED))
def test_shapes_from_public_reports(name: str) -> None:
    lines, exc_type, where = CITED[name]
    crashes = crashes_in_text("\n".join(lines) + "\n")
    assert len(crashes) == 1 if where is None else crashes
    last = max(crashes, key=lambda c: c.line_no)
    assert last.exc_type == exc_type
    if where is None:
        assert last.end_line == len(lines), "its wrapped message is part of it"
    else:
        assert last.user_frame is not None and last.user_frame.describe().startswith(where)


# ---------------------------------------------------------------- messages over several lines, '\r'

def test_a_message_over_several_lines_is_one_error() -> None:
    # The JAX callback's message holds a whole traceback and an inner IndexError: one error.
    crashes = find_crashes(SHAPES / "jax-callback-error.log")
    last = max(crashes, key=lambda c: c.line_no)
    assert last.exc_type == "ValueError"
    assert any("IndexError: index 12" in text for _no, text in last.lines)
    assert not [c for c in crashes if c.line_no > last.line_no]


def test_a_traceback_glued_to_a_progress_bar_still_opens() -> None:
    # tqdm's bar had no newline: "train:   0%|  | 0/200 [00:00<?, ?it/s]Traceback (most recent call last):"
    story = read_crashes(SHAPES / "retried-io-errors.log")
    first = story.every[0]
    assert first.lines[0][1].endswith("Traceback (most recent call last):") and "it/s]" in first.lines[0][1]
    assert first.summary == "OSError: [Errno 5] Input/output error: '/data/shard-00001.bin'"
    assert len(story.every) == 50
    # A bar with no description starts with spaces: "  0%|   | 0/500 [00:00<?, ?image/s]Traceback ..."
    (crash,) = find_crashes(SHAPES / "tqdm-bare-bar-traceback.log")
    assert crash.shape == "python" and crash.summary == "AttributeError: 'Model' object has no attribute 'test'"
    assert crash.user_frame is not None and crash.user_frame.func == "validate"


# ---------------------------------------------------------------- launcher prefixes

PREFIXED = {
    "torchrun-tee-collate.log": ("[default1]:[rank1]: ValueError: invalid literal", 1, None),
    "srun-label.log": ("1: [rank1]: ValueError: invalid literal", 1, None),
    "srun-label-dataloader.log": ("0: KeyError: 'y'", 0, None),
    "pdsh-workers-dataloader.log": ("worker-1: KeyError: 'y'", None, "worker-1"),
    "pdsh-hosts.log": ("node02: json.decoder.JSONDecodeError", None, "node02"),
    "journald-dataloader.log": ("python[17722]: KeyError: 'y'", None, "vm"),
    "ts-dataloader.log": ("KeyError: 'y'", None, None),
}


@pytest.mark.parametrize("name", sorted(PREFIXED))
def test_prefixes_name_rank_and_host_and_are_see_through(name: str) -> None:
    needle, rank, host = PREFIXED[name]
    line = next(text for text in (SHAPES / name).read_text().splitlines() if needle in text)
    prefix, body = split_prefix(line)
    assert prefix.width and body == line[prefix.width:]
    assert not body[:1].isspace() and body.split(":", 1)[0] in ("ValueError", "KeyError", "json.decoder.JSONDecodeError")
    assert prefix.global_rank == rank and prefix.host == host


def test_frames_keep_their_indentation_after_the_prefix() -> None:
    text = (SHAPES / "srun-label.log").read_text().splitlines()
    frame = next(t for t in text if t.startswith("1: [rank1]:   File "))
    assert split_prefix(frame)[1].startswith('  File "/tmp/ns-cap/ddp_collate.py"')
    stamped = next(t for t in (SHAPES / "ts-dataloader.log").read_text().splitlines() if '  File "/tmp/ns-cap/dl_train.py", line 15' in t)
    assert split_prefix(stamped)[1].startswith('  File "')


def test_exception_names_and_config_lines_are_not_hosts() -> None:
    for line in ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "ValueError: x",
                 "Warning: something", "pydantic_core._pydantic_core.ValidationError: 2 validation errors for Settings"):
        assert split_prefix(line)[0].width == 0, line


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(PREFIXED))
def test_an_anchored_rule_pattern_matches_through_every_prefix(name: str, engine: str) -> None:
    # A rule written for the line as the program printed it (`^KeyError: 'y'`) matches whatever
    # launcher prefixed it, with the rank the prefix names.
    needle, rank, _host = PREFIXED[name]
    path = SHAPES / name
    line = next(text for text in path.read_text().splitlines() if needle in text)
    pattern = "^" + re.escape(split_prefix(line)[1].split(" ", 1)[0])
    result = Scanner(TextKind.LOG, PatternSet([pattern]), engine).scan(TextFile(TextKind.LOG, path, name, mtime=path.stat().st_mtime))
    hits = [h for summary in result.summaries(0).values() for h in summary.hits()]
    assert any(needle in h.text for h in hits), pattern
    word = pattern[1:].replace("\\", "")
    assert all(h.span and h.text[h.span[0]:h.span[1]] == word for h in hits), "the match's place in the whole line"
    if rank is not None:
        assert rank in result.summaries(0)


# ---------------------------------------------------------------- the user's own code, named

@pytest.mark.parametrize(("name", "frame"), [
    ("ipython-script.log", "ipy_cell.py:2 (in <listcomp>)"), ("ipython-interactive.log", "Cell In[1]:2 (in f)"),
    ("ipython7-script.log", "ipy_cell.py:2 (in <listcomp>)"), ("ipython7-interactive.log", "<ipython-input-1-def7d6d68803>:2 (in f)"),
    ("faulthandler-threads.log", "fh_threads.py:12"), ("python-full.log", "json_cfg.py:3"),
    ("jax-xla-runtime-error.log", "jax_oom.py:4"), ("jax-callback-error.log", "jax_cb.py:8 (in host_lookup)"),
])
def test_the_deepest_frame_of_the_users_own_code(name: str, frame: str) -> None:
    crash = max(find_crashes(SHAPES / name), key=lambda c: c.line_no)
    assert crash.user_frame is not None and crash.user_frame.describe() == frame


def test_a_bad_sample_names_the_users_frame_and_the_worker() -> None:
    causes = rank_all([], evidence_from_paths([str(SHAPES / "dataloader-keyerror.log")])).causes
    assert causes[0].title == "Your code raised KeyError: 'y' at dl_train.py:15 (in __getitem__), in DataLoader worker process 0"
    assert "dl_train.py:15 (in __getitem__)" in causes[0].explanation


@pytest.mark.parametrize("name", ["torchrun-tee-collate.log", "srun-label.log"])
def test_the_ranks_own_error_outranks_what_follows_from_it(name: str) -> None:
    diagnosis = diagnose(evidence_from_paths([str(SHAPES / name)]), RULES)
    top = diagnosis.causes[0]
    assert top.id == UNRECOGNISED_ID
    assert top.title == ("Your code raised ValueError: invalid literal for int() with base 10: 'n/a' at ddp_collate.py:13 "
                         "(in collate_fn), in DataLoader worker process 0 on rank 1")
    others = [c.id for c in diagnosis.causes[1:] if Severity(c.severity).at_least(Severity.WARNING)]
    assert "distributed.gloo-peer-closed" in others
    assert not [c for c in diagnosis.causes if c.id == UNRECOGNISED_ID and "Connection closed" in c.title]


def test_the_torchrun_rank_exception_fixture_names_rank_1s_own_code() -> None:
    causes = diagnose(evidence_from_paths([str(FIXTURES / "torchrun-rank-exception")]), RULES).causes
    assert causes[0].title.startswith("Your code raised ValueError: data check failed at step 5")
    assert causes[0].title.endswith("at ddp_train.py:33 (in main) on rank 1")


# ---------------------------------------------------------------- survived errors

def test_fifty_retried_io_errors_and_a_finish_are_healthy() -> None:
    diagnosis = diagnose(evidence_from_paths([str(SHAPES / "retried-io-errors.log")]), RULES)
    assert diagnosis.state == "finished"
    assert not [c for c in diagnosis.causes if Severity(c.severity).at_least(Severity.ERROR)], \
        [(c.id, c.severity) for c in diagnosis.causes]
    io = [c for c in diagnosis.causes if c.id == "disk.io-error"]
    # Survived, and the run then finished: a note (info), not a warning of the run.
    assert io and io[0].severity == Severity.INFO and "went on after it" in io[0].title


def test_the_same_error_ending_the_run_stays_an_error() -> None:
    diagnosis = diagnose(evidence_from_paths([str(SHAPES / "tqdm-traceback.log")]), RULES)
    assert diagnosis.state == "crashed"
    assert diagnosis.causes[0].id == "disk.io-error" and diagnosis.causes[0].severity == Severity.ERROR


def test_the_fallback_downgrades_a_survived_error(tmp_path: Path) -> None:
    # Mechanical: the retried run's log without its last two lines (no "Training completed"),
    # scanned with no rule: the tracebacks it went on after are warnings, and it just stops.
    lines = (SHAPES / "retried-io-errors.log").read_text().splitlines(keepends=True)
    log = tmp_path / "retried.log"
    log.write_text("".join(lines[:-2]))
    ranked = rank_all([], evidence_from_paths([str(log)]))
    fallback = [c for c in ranked.causes if c.id == UNRECOGNISED_ID]
    assert fallback and all(c.severity == Severity.WARNING for c in fallback)
    assert ranked.state.state == "stopped"


def test_tqdms_last_word_after_a_crash_is_not_progress() -> None:
    # tqdm redraws its bar, unchanged, as the interpreter exits: not the run going on.
    story = read_crashes(SHAPES / "tqdm-traceback.log")
    assert story.crashes[-1].survived is False


# ---------------------------------------------------------------- the state and the fallback agree

def test_a_log_that_just_stops_is_stopped_and_not_a_crash(tmp_path: Path) -> None:
    # Mechanical: the DataLoader run's log cut before its traceback.
    lines = (SHAPES / "dataloader-keyerror.log").read_text().splitlines(keepends=True)
    log = tmp_path / "train.log"
    log.write_text("".join(lines[:4]))
    ranked = rank_all([], evidence_from_paths([str(log)]))
    # Scanned alone, nothing says it was killed: it ended without an error, and says so (issue 31).
    assert ranked.causes == []
    assert ranked.state.state == "stopped" and "without an error" in ranked.state.reason


@pytest.mark.parametrize("fixture", ["healthy-cpu-train", "healthy-hf-trainer", "healthy-lightning", "healthy-wandb-offline"])
def test_a_healthy_finished_log_fires_neither(fixture: str) -> None:
    diagnosis = diagnose(evidence_from_paths([str(FIXTURES / fixture)]), RULES)
    assert diagnosis.state == "finished"
    assert not [c for c in diagnosis.causes if c.id == UNRECOGNISED_ID or c.id.startswith("run.")]


# ---------------------------------------------------------------- not misled

def test_sigkill_with_a_kernel_log_of_the_moment_is_killed_from_outside() -> None:
    causes = diagnose(evidence_from_paths([str(FIXTURES / "torchrun-sigkill-dmesg-clean")]), RULES).causes
    sigkill = next(c for c in causes if c.id == "memory.sigkill-no-oom-record")
    assert "killed from outside" in sigkill.title and "probably out of memory" not in sigkill.title
    assert causes[0] is sigkill
    assert not [c for c in causes if c.id == "memory.host-oom-kill"], "another pid's OOM kill is a neighbour's"


def test_sigkill_with_a_kernel_log_read_before_the_kill_proves_nothing() -> None:
    # fixtures/torchrun-rank-sigkill: its kernel log was read before the run (mtime), so memory stays likely.
    from diagnose.evidence.bundle import evidence_from_bundle

    causes = diagnose(evidence_from_bundle(FIXTURES / "torchrun-rank-sigkill"), RULES).causes
    sigkill = next(c for c in causes if c.id == "memory.sigkill-no-oom-record")
    assert "probably out of memory" in sigkill.title


def test_a_synchronous_cuda_error_is_not_reported_asynchronously() -> None:
    ids = [c.id for c in diagnose(evidence_from_paths([str(SHAPES / "cuda-graph-capture.log")]), RULES).causes]
    assert ids[0] == "gpu.cuda-graph-capture" and "gpu.cuda-async-report" not in ids


def test_an_asynchronous_cuda_error_still_is() -> None:
    ids = [c.id for c in diagnose(evidence_from_paths([str(FIXTURES / "gpu-device-assert-live")]), RULES).causes]
    assert "gpu.cuda-async-report" in ids


# ---------------------------------------------------------------- year-less times

GLOG = "W1130 04:50:55.517000 18253 torch/distributed/run.py:874] "  # fixtures/torchrun-rank-exception/logs/train-tee.log


def _local(year: int, month: int, day: int, hh: int, mm: int, ss: int) -> float:
    return time.mktime((year, month, day, hh, mm, ss, 0, 0, -1))


def test_a_yearless_time_is_never_placed_after_the_logs_end() -> None:
    # A log that ran over New Year: its mtime is in January 2027, the glog line is of 30 November.
    end = _local(2027, 1, 2, 10, 0, 0)
    clock = log_clock("", "", end)
    assert clock.year == 2027
    assert log_time(GLOG, clock.year, clock.not_after) == pytest.approx(_local(2026, 11, 30, 4, 50, 55) + 0.517)


def test_a_yearless_time_takes_the_year_of_the_logs_own_dates(tmp_path: Path) -> None:
    # The torchrun log's summary writes full dates (time : 2026-11-30_04:51:06); a copy made years
    # later (mtime 2030) must not move its glog lines to 2030, nor to today.
    log = tmp_path / "train-tee.log"
    shutil.copy(FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log", log)
    later = _local(2030, 6, 1, 12, 0, 0)
    os.utime(log, (later, later))
    text = log.read_text()
    clock = log_clock(text[:65536], text[-65536:], later)
    assert clock.year == 2026 and clock.source == "the log's own dates"
    source = TextFile(TextKind.LOG, log, "train-tee.log", mtime=later)
    result = Scanner(TextKind.LOG, PatternSet([r"Sending process \d+ closing signal SIGTERM"]), "pure").scan(source)
    (hit,) = [h for s in result.summaries(0).values() for h in s.hits()]
    assert hit.time == pytest.approx(_local(2026, 11, 30, 4, 51, 7) + 0.4)


def test_ts_and_journald_stamps_are_read_with_the_logs_year() -> None:
    line = next(t for t in (SHAPES / "journald-dataloader.log").read_text().splitlines() if "KeyError: 'y'" in t)
    assert log_time(line, 2026, _local(2026, 12, 2, 0, 0, 0)) == _local(2026, 12, 1, 20, 59, 32)
    assert log_time(line) is None, "no year known: no time, never today's year"
