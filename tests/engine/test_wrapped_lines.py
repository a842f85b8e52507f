"""Messages soft-wrapped over two or three lines are read as one (engine/wrapped.py), and a C++
abort that says nothing is its recognised error's own abort (engine/rank.py). The logs are real
cases of the corpus (corpus/cases/*/case.yaml names each one's source), read as published."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.engine.rank import UNRECOGNISED_ID
from diagnose.engine.wrapped import MIN_WRAPPED, _pairs
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.rules.load import load_rules

CASES = Path(__file__).resolve().parents[2] / "corpus" / "cases"
RULES = load_rules()


def _log(case: str) -> Path:
    files = [p for p in (CASES / case).iterdir() if p.name != "case.yaml"]
    assert len(files) == 1, files
    return files[0]


def _causes(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    report = diagnose(evidence_from_paths([str(path)]), RULES)
    return [(c.id, tuple(item.text for item in c.evidence)) for c in report.causes]


# case -> (the rule its source concluded, a text of the second or third line its evidence must show)
WRAPPED = {
    # "... collective operation timeout: " / "WorkNCCL(SeqNum=2059, ... ran for 1801398 " / "milliseconds ..."
    "p-trlx-ppo-rank-ahead-allgather-timeout": ("nccl.watchdog-timeout", "WorkNCCL(SeqNum=2059"),
    # "Resource exhausted: Out " / "of memory while trying to allocate 5520758552 bytes."
    "x-jax-788-oom-after-allocator-change": ("memory.xla-resource-exhausted", "of memory while trying to allocate"),
    # "Loaded runtime CuDNN l" / "ibrary: 7.4.1 but source was compiled with: 7.6.4."
    "x-automl-33-tf-cudnn-runtime-older": ("library.paired-version-mismatch", "ibrary: 7.4.1"),
}


@pytest.mark.parametrize("case", sorted(WRAPPED))
def test_a_wrapped_message_is_named_with_all_its_lines(case: str) -> None:
    rule, second = WRAPPED[case]
    causes = _causes(_log(case))
    assert causes and causes[0][0] == rule, causes[:3]
    assert any(second in text for text in causes[0][1]), causes[0][1]


def test_joining_needs_a_long_first_line_and_a_match_across_the_break(tmp_path: Path) -> None:
    # Two short real lines that would match only if any two lines were glued: not a wrap.
    text = "Resource exhausted: Out\nof memory while trying to allocate 5520758552 bytes.\n"
    assert len("Resource exhausted: Out") < MIN_WRAPPED
    assert _pairs(text, 1) == []
    # A healthy log of the corpus gains no cause from the joining.
    healthy = next(p for p in CASES.iterdir() if p.name.startswith("q-darknet-yolov3"))
    log = tmp_path / "train_log.txt"
    shutil.copyfile(_log(healthy.name), log)
    assert not [c for c in _causes(log) if c[0] != UNRECOGNISED_ID and "memory" in c[0]]


def test_a_cpp_abort_with_no_message_is_the_recognised_errors_own() -> None:
    # Two ranks' watchdogs time out; the log ends in "terminate called after throwing an instance
    # of 'std::runtime_error'" with its what() line cut off: the timeout is the cause, not an
    # unrecognised C++ exception.
    causes = _causes(_log("s-picotron-6-watchdog-first-allreduce"))
    assert causes[0][0] == "nccl.watchdog-timeout", causes[:3]
    assert UNRECOGNISED_ID not in [c[0] for c in causes]


def test_the_corpus_logs_are_read_as_published() -> None:
    # The three wrapped logs are plain text; a gzip case would be read through its .gz.
    for case in WRAPPED:
        data = _log(case).read_bytes()
        assert not data.startswith(b"\x1f\x8b") or gzip.decompress(data)
