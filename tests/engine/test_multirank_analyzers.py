"""Multi-rank reasoning on real output: torchelastic summaries and error files, NCCL/gloo collective
timeouts across ranks, rank prefixes of torchrun --tee logs, CUDA errors reported asynchronously.

Logs come from the fixtures (real torchrun runs on CPU and on 2x H200, see each fixture's HOW.md) and
from public reports (the URL is beside each quoted line; also in /work/capture/research/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.engine.analyzers.collectives import analyse
from diagnose.engine.analyzers.cuda import XID_LINE, assert_hint, describe_xid, xid_events
from diagnose.engine.analyzers.runlog import RunLog, line_rank, read_file, run_log
from diagnose.engine.analyzers.torchelastic import summarise
from diagnose.engine.tracebacks import find_crashes
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.evidence.lines import log_time, rank_of
from diagnose.evidence.model import Evidence, RunInfo, TextFile, TextKind
from diagnose.evidence.parsers.elastic import ElasticSummary, parse_elastic_error, parse_failure_summary
from diagnose.rules.load import load_rules
from tests.support.paths import FIXTURES

RULES = load_rules()


def lines_of(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(path.read_text(encoding="utf-8").split("\n"), 1))


def summary_of(path: Path) -> ElasticSummary:
    lines = lines_of(path)
    start = next(i for i, (_no, text) in enumerate(lines) if "errors.ChildFailedError: " in text)
    summary = parse_failure_summary(lines[start:])
    assert summary is not None
    return summary


def log_evidence(tmp_path: Path, text: str, name: str = "train.log", rank: int | None = None) -> Evidence:
    path = tmp_path / name
    path.write_text(text + "\n", encoding="utf-8")
    return Evidence(run=RunInfo("t", "test"), texts=(TextFile(TextKind.LOG, path, name, rank),))


# ---------------------------------------------------------------- torchelastic summary and error files


def test_summary_root_cause_is_the_block_after_failures() -> None:
    # torch 2.13: "Failures:" (rank 0, SIGTERM, with the consequence's traceback) comes BEFORE the root cause.
    summary = summary_of(FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log")
    root = summary.root
    assert root is not None and root.rank == 1 and root.local_rank == 1 and root.exitcode == 1
    assert root.error.startswith("ValueError: data check failed at step 5")
    [other] = summary.others
    assert other.rank == 0 and other.exitcode == -15 and other.signal == "SIGTERM"
    assert other.error.startswith("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo")


def test_summary_of_a_sigkilled_rank_has_no_error_of_its_own() -> None:
    root = summary_of(FIXTURES / "torchrun-rank-sigkill" / "logs" / "train.log").root
    assert root is not None and root.rank == 1 and root.exitcode == -9 and root.signal == "SIGKILL"
    assert root.error == "Signal 9 (SIGKILL) received by PID 18642" and not root.has_own_error and root.error_file is None


def test_summary_without_signal_names_gets_them_from_the_exit_code() -> None:
    # torch 2.11 prints "exitcode  : -6 (pid: 829)" without "(SIGABRT)"; the CUDA error is multi-line.
    summary = summary_of(FIXTURES / "device-assert-2gpu" / "logs" / "nccl-assert.log")
    assert summary.root is not None and summary.root.signal == "SIGABRT"
    assert summary.root.error == "torch.AcceleratorError: CUDA error: device-side assert triggered"
    assert summary.others[0].torn_down


def test_error_file_message_is_its_first_line_and_carries_the_time() -> None:
    # The error file of a CUDA error: the exception line first, the DSA hint lines after it.
    path = FIXTURES / "device-assert-2gpu" / "logs" / "error.json"
    record, message, when = parse_elastic_error(path.read_text(), "error.json", 1)
    assert record.message == "AcceleratorError: CUDA error: device-side assert triggered"
    assert message.rstrip().endswith("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    assert when is not None and record.time == when and record.rank == 1


def test_hang_explanation_says_the_root_cause_is_the_victim() -> None:
    evidence = evidence_from_bundle(FIXTURES / "gloo-timeout")
    captures, items = summarise(run_log(evidence), evidence)
    assert captures["root_rank"] == "0" and captures["hung_rank"] == "1"
    assert "first rank to EXIT" in captures["elastic_summary"] and "step 5: waiting on slow storage" in captures["elastic_summary"]
    assert any("Signal 15 (SIGTERM) received by PID 20089" in item.text for item in items)


def test_error_files_alone_name_the_first_rank_by_time(tmp_path: Path) -> None:
    # Only the per-rank folder of a --tee run, no console log: the error files decide.
    evidence = evidence_from_bundle(FIXTURES / "torchrun-rank-exception")
    without_console = Evidence(run=evidence.run, texts=tuple(t for t in evidence.texts if "train-tee" not in t.display), exits=evidence.exits)
    captures, _items = summarise(run_log(without_console), without_console)
    assert captures["root_rank"] == "1" and captures["root_error"].startswith("ValueError")


# ---------------------------------------------------------------- rank attribution


@pytest.mark.parametrize(("line", "rank"), [
    ("[default1]:[rank1]: ValueError: data check failed", 1),  # torchrun --tee in front of torch's prefix
    ("[default3]:[rank11]:[E1130 05:07:56.342120872 ProcessGroupNCCL.cpp:689] x", 11),  # the global rank wins
    ("[default0]:train:   5%|", 0),
    ("[rank0]: RuntimeError: x", 0),
    ("vm:646:646 [0] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>", None),
])
def test_rank_prefixes(line: str, rank: int | None) -> None:
    assert rank_of(line) == rank


def test_nccl_inner_rank_names_the_rank_without_a_prefix() -> None:
    # torch <= 2.0: no [rankN]: prefix, only "[Rank 1]" inside (https://github.com/OFA-Sys/OFA/issues/271)
    line = ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, "
            "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.")
    assert line_rank(line, None) == 1


def test_tee_prefixed_tracebacks_are_found_per_rank() -> None:
    crashes = find_crashes(FIXTURES / "torchrun-rank-exception" / "logs" / "train-tee.log")
    assert [(c.rank, c.exc_type) for c in crashes][:2] == [(1, "ValueError"), (0, "RuntimeError")]


def test_glog_time_behind_rank_prefixes_and_short_months() -> None:
    prefixed = log_time("[default0]:[rank0]:[E1130 05:07:56.342120872 ProcessGroupNCCL.cpp:689] x", 2026)
    plain = log_time("E1130 05:07:56.342000 676 torch/distributed/elastic/multiprocessing/api.py:1012] x", 2026)
    assert prefixed is not None and plain is not None and abs(prefixed - plain) < 1
    june = log_time("[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] x", 2025)  # BasicSR#737: "E626"
    assert june is not None


def test_per_rank_files_of_the_tee_layout_carry_their_rank() -> None:
    evidence = evidence_from_bundle(FIXTURES / "nccl-hang-2gpu")
    ranks = {t.display.split("attempt_0/")[-1]: t.rank for t in evidence.texts if "attempt_0" in t.display}
    assert ranks == {"0/stdout.log": 0, "0/stderr.log": 0, "1/stdout.log": 1, "1/stderr.log": 1}


# ---------------------------------------------------------------- collective timeouts


def test_nccl_hang_rank_behind_from_flight_recorder_progress() -> None:
    log = run_log(evidence_from_bundle(FIXTURES / "nccl-hang-2gpu"))
    verdict = analyse(log)
    assert verdict.lagging == [1] and verdict.basis == "progress"
    assert verdict.first is not None and (verdict.first.op, verdict.first.seq, verdict.first.timeout_ms) == ("ALLREDUCE", 11, 20000)
    assert log.last_line[1].body == "step 5: waiting on slow storage ..."


def test_gloo_hang_rank_behind_from_absence() -> None:
    verdict = analyse(run_log(evidence_from_bundle(FIXTURES / "gloo-timeout")))
    assert verdict.lagging == [1] and verdict.basis == "absent" and list(verdict.timed_out) == [0]


# https://github.com/hiyouga/LlamaFactory/issues/7396 (torch 2.4, all shown ranks at the same collective)
SAME_SEQ = """\
[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.
[80747] [rank4]:[E321 02:07:08.414640780 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600067 milliseconds before timing out.
[80748] [rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.
[80749] [rank3]:[E321 02:07:08.465224069 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579."""

# https://github.com/hiyouga/LlamaFactory/issues/2902 (comment of 2024-11-23): rank 1 already in SeqNum 1517
LATER_SEQ = """\
  2%|▏         | 13/620 [01:07<50:20,  4.98s/it][rank0]:[E1123 00:52:57.664949121 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1516, OpType=ALLREDUCE, NumelIn=25427968, NumelOut=25427968, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.
[rank0]:[E1123 00:52:57.665427695 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1516, last enqueued NCCL work: 1516, last completed NCCL work: 1515.
[rank1]:[E1123 00:52:57.704703955 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1517, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600026 milliseconds before timing out."""

# https://github.com/modelscope/DiffSynth-Studio/issues/458 (torch 2.5, PG ID 2: same SeqNum, different sizes)
MISMATCH = """\
[rank4]:[E318 07:39:53.792630246 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=610, OpType=COALESCED, NumelIn=56320, NumelOut=450560, Timeout(ms)=600000) ran for 600086 milliseconds before timing out.
[rank4]:[E318 07:39:53.792772442 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 9 Rank 4] Exception (either an error or timeout) detected by watchdog at work: 610, last enqueued NCCL work: 616, last completed NCCL work: 609.
[rank6]:[E318 07:39:53.793305338 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=610, OpType=COALESCED, NumelIn=76800, NumelOut=614400, Timeout(ms)=600000) ran for 600087 milliseconds before timing out."""


def test_every_shown_rank_timed_out_together(tmp_path: Path) -> None:
    verdict = analyse(run_log(log_evidence(tmp_path, SAME_SEQ)))
    assert verdict.lagging == [] and sorted(verdict.timed_out) == [0, 3, 4]
    assert "not here" in verdict.detail
    assert verdict.progress[0].pg == "1" and (verdict.progress[0].enqueued, verdict.progress[0].completed) == (1582, 1579)


def test_rank_in_an_earlier_collective_is_behind(tmp_path: Path) -> None:
    verdict = analyse(run_log(log_evidence(tmp_path, LATER_SEQ)))
    assert verdict.lagging == [0] and verdict.basis == "seq"


def test_same_seqnum_with_different_sizes_is_a_mismatch(tmp_path: Path) -> None:
    verdict = analyse(run_log(log_evidence(tmp_path, MISMATCH)))
    assert "different collectives" in verdict.mismatch and "rank 4: COALESCED 56320/450560" in verdict.mismatch


def test_one_rank_log_cannot_name_the_culprit(tmp_path: Path) -> None:
    first_and_status = "\n".join(SAME_SEQ.splitlines()[0::2])  # rank 0's two lines
    verdict = analyse(run_log(log_evidence(tmp_path, first_and_status)))
    assert verdict.lagging == [] and "Only rank 0" in verdict.detail


def test_hung_rank_rule_stands_down_when_the_rank_behind_has_its_own_failure() -> None:
    # rank 1 SIGKILLed (torchrun-rank-sigkill) is a kill, not a hang: the SIGKILL rule is the cause.
    causes = [c.id for c in diagnose(evidence_from_bundle(FIXTURES / "torchrun-rank-sigkill"), RULES).causes]
    assert "distributed.hung-rank" not in causes and causes[0] == "memory.sigkill-no-oom-record"


def test_runlog_reads_each_file_once_per_run() -> None:
    evidence = evidence_from_bundle(FIXTURES / "nccl-hang-2gpu")
    assert run_log(evidence) is run_log(evidence)
    single = read_file(evidence.texts[0])
    assert isinstance(single, RunLog) and single.summaries


# ---------------------------------------------------------------- ranking


def test_the_rank_own_error_ranks_above_the_distributed_symptoms() -> None:
    causes = diagnose(evidence_from_bundle(FIXTURES / "torchrun-rank-exception"), RULES).causes
    assert causes[0].id == "unrecognised.crash" and "ValueError: data check failed" in causes[0].title
    unrecognised = [c for c in causes if c.id == "unrecognised.crash"]
    assert len(unrecognised) == 1, "the gloo error and ChildFailedError are recognised symptoms, not unrecognised crashes"
    child = next(c for c in causes if c.id == "distributed.child-failed")
    assert "rank 1" in child.title and "ValueError" in child.explanation


def test_async_cuda_error_is_a_symptom_of_the_kernel_assertion_and_xid43() -> None:
    causes = diagnose(evidence_from_bundle(FIXTURES / "device-assert-2gpu"), RULES).causes
    assert causes[0].id == "gpu.device-assert"
    assert "t >= 0 && t < n_classes" in causes[0].explanation and "= rank 1" in causes[0].explanation
    trailer = next(c for c in causes if c.id == "gpu.cuda-async-report")
    assert trailer.role == "symptom" and "kernel assertion `t >= 0 && t < n_classes`" in trailer.explanation
    xid = next(c for c in causes if c.id == "gpu.xid-application")
    assert causes.index(xid) > 0 and "pid 829 is rank 1" in xid.explanation


# ---------------------------------------------------------------- Xid table


def test_xid_sample_from_the_h200_is_an_application_xid(tmp_path: Path) -> None:
    # /work/shared/samples/h200/dmesg-nvrm-tail.txt, copied into tests/data/samples/h200/
    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "h200" / "dmesg-nvrm-tail.txt"
    evidence = Evidence(run=RunInfo("t", "test"), texts=(TextFile(TextKind.DMESG, sample, "dmesg"),))
    [event] = xid_events(evidence)
    assert (event.xid, event.pci, event.pid, event.name, event.kind) == (43, "0000:00:06", "680", "python3", "application")


@pytest.mark.parametrize(("xid", "kind"), [(13, "application"), (31, "application"), (43, "application"), (45, "consequence"),
                                           (48, "hardware"), (63, "informational"), (64, "hardware"), (74, "hardware"),
                                           (79, "hardware"), (92, "informational"), (94, "hardware"), (95, "hardware"),
                                           (119, "hardware"), (120, "hardware")])
def test_xid_table_tells_application_from_hardware(xid: int, kind: str) -> None:
    assert describe_xid(xid)[2] == kind


def test_xid_line_with_pid_but_no_name() -> None:
    # stas00/ml-engineering compute/accelerator/nvidia/debug.md
    match = XID_LINE.search("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.")
    assert match is not None and match.group("pid") == "1896" and match.group("msg").startswith("Row Remapper")


def test_assert_hints() -> None:
    assert "vocab" in assert_hint("srcIndex < srcSelectDimSize")
    assert "number of classes" in assert_hint("t >= 0 && t < n_classes")
