"""The files ML runs and their schedulers leave, read in folder scans (and named), each from a
real sample (tests/data/mlfiles/HOW.md): what folder scans skip and why, HF Trainer
trainer_state.json, Lightning metrics.csv / hparams.yaml, wandb's internal log, torchelastic
error files, NCCL flight-recorder dumps (never unpickled with pickle.load), DeepSpeed multi-node
logs with host and rank, Slurm output and sacct, Kubernetes pod status."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from diagnose.evidence.inputs import evidence_from_paths
from diagnose.evidence.model import FileKind
from diagnose.evidence.parsers.flightrec import load_data_only, read_flight_record
from diagnose.evidence.parsers.packages import looks_like_packages
from diagnose.evidence.parsers.sacct import parse_sacct
from diagnose.evidence.sniff import sniff
from tests.support.paths import DATA, REPO
from tests.support.report import invoke

ML = DATA / "mlfiles"
RUNS = DATA / "runs"


def scan(*paths: str | Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    result = invoke(["scan", *map(str, paths), "--format", "json", "--fail-on", "never", *extra])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def cause_ids(data: dict[str, Any]) -> list[str]:
    return [c["id"] for c in data["causes"]]


# ---------------------------------------------------------------- what folder scans skip

def test_a_folder_scan_says_what_it_skipped_and_why(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(ML / "lightning-nan", folder)  # metrics.csv, hparams.yaml, pl_train.py
    shutil.copy(ML / "hf-trainer-nan" / "hf_train.py", folder / "other.py")
    (folder / "weights.safetensors").write_bytes(b"\x00" * 64)
    data = scan(folder)
    notes = data["notes"]
    assert any(n.endswith("pl_train.py: source code (.py)") for n in notes), notes
    assert any(n.endswith("weights.safetensors: model, tensor or data file (.safetensors)") for n in notes), notes
    # the terminal report counts them, -v lists them
    plain = " ".join(invoke(["scan", str(folder), "--fail-on", "never"]).stdout.split())  # unwrapped
    assert "3 file(s) in the scanned folders passed over as no evidence (-v lists them and why)" in plain
    verbose = invoke(["scan", str(folder), "--fail-on", "never", "-v"]).stdout
    assert "source code (.py)" in verbose and "(-v lists them" not in verbose


def test_json_in_a_folder_is_read_by_what_it_holds(tmp_path: Path) -> None:
    folder = tmp_path / "captured"
    folder.mkdir()
    shutil.copy(ML / "hf-trainer-nan" / "trainer_state.json", folder / "state-at-crash.json")  # any name
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    data = scan(folder)
    assert "numerics.nan-loss" in cause_ids(data)
    assert any("tokenizer_config.json: JSON that is no known evidence" in n for n in data["notes"])


# ---------------------------------------------------------------- HF Trainer, Lightning, wandb

def test_trainer_state_nan_loss_from_its_log_history() -> None:
    data = scan(ML / "hf-trainer-nan" / "trainer_state.json")
    (cause,) = [c for c in data["causes"] if c["id"] == "numerics.nan-loss"]
    lines = (ML / "hf-trainer-nan" / "trainer_state.json").read_text().splitlines()
    for item in cause["evidence"]:
        if item["line"]:
            assert "NaN" in lines[item["line"] - 1] or "nan" in item["text"]
    # where it went bad, and how it ran away before
    note = next(n for n in data["notes"] if n.startswith("tests/data/mlfiles/hf-trainer-nan/trainer_state.json: loss"))
    assert "at step 12 of 12" in note and "first nan at step 4 (line 37)" in note and "grew 7.3e+10-fold" in note
    assert lines[36].strip() == '"loss": NaN,'


def test_healthy_trainer_state_is_quiet() -> None:
    data = scan(ML / "hf-trainer-ok" / "trainer_state.json")
    assert not [c for c in data["causes"] if c["category"] == "numerics"]
    assert any("trainer_state.json: loss" in n and "first" not in n for n in data["notes"])


def test_lightning_metrics_csv_nan_and_divergence() -> None:
    nan = scan(ML / "lightning-nan")
    (cause,) = [c for c in nan["causes"] if c["id"] == "numerics.nan-loss-metrics"]
    item = cause["evidence"][0]
    assert item["source"].endswith("lightning-nan/metrics.csv") and item["line"] == 11
    assert (ML / "lightning-nan" / "metrics.csv").read_text().splitlines()[10] == "1,9,inf"
    assert cause["title"] == "The logged train_loss became inf at step 9 - training diverged"
    assert any("hparams.yaml: hyperparameters lr=50.0" in n for n in nan["notes"])
    diverged = scan(ML / "lightning-diverge" / "metrics.csv")
    (grown,) = [c for c in diverged["causes"] if c["id"] == "numerics.loss-diverged"]
    assert "from step 0 to step 15" in grown["title"] and "2.0e+14-fold" in grown["title"]
    assert [e["line"] for e in grown["evidence"]] == [2, 17]
    healthy = scan(ML / "lightning-ok")
    assert not [c for c in healthy["causes"] if c["category"] == "numerics"]


def test_metric_rules_skip_without_a_metrics_file() -> None:
    data = scan(DATA / "ci" / "healthy" / "train.log")
    skipped = [s["rule"] for s in data["skipped"]]
    assert "numerics.loss-diverged" in skipped and "numerics.nan-loss-metrics" in skipped
    assert "numerics.nan-loss" not in skipped  # the log rule still answers from the log alone


def test_one_cause_when_the_log_and_the_metrics_file_both_say_nan(tmp_path: Path) -> None:
    # trainer_state.json is scanned as text as well: its "loss": NaN lines make numerics.nan-loss
    data = scan(ML / "hf-trainer-nan" / "trainer_state.json")
    ids = cause_ids(data)
    assert "numerics.nan-loss" in ids and "numerics.nan-loss-metrics" not in ids


def test_wandb_internal_log_is_read_in_a_folder() -> None:
    data = scan(ML / "wandb-offline")
    scanned = data["run"]["inputs"]
    assert any(p.endswith("logs/debug-internal.log") for p in scanned), scanned
    assert any(p.endswith("logs/debug.log") for p in scanned)


def test_wandb_files_go_into_a_bundle(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    shutil.copytree(RUNS / "wandb-offline-flex7w", work)
    (tmp_path / "diagnose.toml").write_text('[collect]\nskip = ["dmesg", "gpu", "packages", "tmux", "process"]\n')
    out = tmp_path / "bundle"
    result = invoke(["collect", "flex7w", "--dir", str(work), "-o", str(out)], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    kinds = {Path(f["path"]).name: f["kind"] for f in manifest["files"]}
    assert kinds.get("debug-internal.log") == "log" and kinds.get("output.log") == "log", kinds


# ---------------------------------------------------------------- torchelastic, flight recorder, DeepSpeed

def test_torchelastic_error_file_in_a_folder_whatever_the_rendezvous_id() -> None:
    data = scan(RUNS / "torchelastic-flex7e")
    assert any(p.endswith("attempt_0/1/error.json") for p in data["run"]["inputs"])
    assert data["causes"], data["causes"]  # the failed rank is reported
    error_file = next((RUNS / "torchelastic-flex7e").rglob("error.json"))
    assert sniff(Path("anything.json"), error_file.read_bytes()[:4096]) is FileKind.ELASTIC_ERROR


def test_flight_recorder_dumps_say_which_rank_is_behind() -> None:
    data = scan(ML / "nccl-trace-desync")
    notes = data["notes"]
    assert any("nccl_trace_rank_0: flight recorder (version 2.10) of rank 0: 4 collective(s); last enqueued #4, "
               "last completed #2; last gloo:all_reduce (scheduled) called from fr_desync.py:13 (work)" in n for n in notes)
    assert any(n.startswith("flight recorder: rank 1 (at #3) never enqueued collective #4 that rank 0 wait(s) in") for n in notes)


def test_a_hostile_dump_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"

    class Hostile:
        def __reduce__(self) -> tuple[Any, ...]:
            return (open, (str(marker), "w"))

    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [Hostile()]}))
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        load_data_only(dump.read_bytes())
    _notes, gap, record = read_flight_record(dump, "nccl_trace_rank_0")
    assert record is None and gap is not None and "refused io.open" in gap and not marker.exists()
    data = scan(dump)
    assert any(g["source"] == "nccl-trace" and "not a flight-recorder dump" in g["reason"] for g in data["gaps"])
    assert not marker.exists()
    # the real dump goes through the same data-only unpickler
    assert load_data_only((ML / "nccl-trace-desync" / "nccl_trace_rank_0").read_bytes())["version"] == "2.10"


def test_deepspeed_multinode_lines_keep_host_and_rank() -> None:
    data = scan(ML / "deepspeed-pdsh" / "ds-pdsh.log")
    items = [e for c in data["causes"] for e in c["evidence"]]
    gloo = next(e for e in items if "Connection closed by peer" in e["text"])
    assert (gloo["host"], gloo["rank"]) == ("worker-0", 0)
    assert all(e["host"] in ("worker-0", "worker-1") for e in items if e["line"])
    from diagnose.engine.tracebacks import crashes_in_text

    crashes = crashes_in_text((ML / "deepspeed-pdsh" / "ds-pdsh.log").read_text())  # pdsh hosts are read as prefixes
    assert (crashes[0].rank, crashes[0].exc_type) == (1, "RuntimeError")
    assert "shard 17 of the dataset is corrupt" in crashes[0].message
    (text,) = evidence_from_paths([str(ML / "deepspeed-pdsh" / "ds-pdsh.log")]).texts
    assert text.host_prefixed
    # an ordinary log is no pdsh output, and "RuntimeError: [rank0]: ..." names no host
    (plain,) = evidence_from_paths([str(DATA / "ci" / "shape-mismatch" / "train.log")]).texts
    assert not plain.host_prefixed


# ---------------------------------------------------------------- Slurm and Kubernetes

def test_sacct_is_not_a_package_list(tmp_path: Path) -> None:
    text = (ML / "sacct" / "sacct.txt").read_text()
    assert looks_like_packages(text) == "pip-list"  # the dashes under the header, as pip list prints them
    assert sniff(Path("sacct.txt"), text.encode()) is FileKind.SACCT
    records = parse_sacct(text, "sacct.txt")
    assert [r.message for r in records] == [f"Slurm job {j} (sleep): FAILED" for j in ("20", "20.0", "21", "21.0")]
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(ML / "sacct" / "sacct.txt", folder / "accounting.txt")
    data = scan(folder)
    assert data["run"]["inputs"] and not any(g["source"] == "packages" for g in data["gaps"])
    evidence = evidence_from_paths([str(folder)])
    assert evidence.packages is None and evidence.exits is not None and len(evidence.exits) == 4


def test_slurm_output_file_is_read_as_a_log(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(ML / "deepspeed-pdsh" / "ds-pdsh.log", folder / "slurm-3884617.out")
    evidence = evidence_from_paths([str(folder)])
    assert [t.display.endswith("slurm-3884617.out") for t in evidence.texts] == [True]


# kubernetes/kubernetes#53669: a real `kubectl get pods -w -o json` of a pod whose container was
# killed (exit code 137, reason Error, no OOMKilled); its containerStatuses block, as quoted there.
K8S_53669 = """{
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {"name": "memcached-0"},
    "status": {
        "containerStatuses": [
            {
                "name": "memcached",
                "lastState": {
                    "terminated": {
                        "containerID": "docker://5954f621c17f13706c25a215db06fe2bf7b9a9a6c732a909eb0db39d62346724",
                        "exitCode": 137,
                        "finishedAt": "2017-10-10T17:41:58Z",
                        "reason": "Error",
                        "startedAt": "2017-10-10T17:20:37Z"
                    }
                },
                "restartCount": 1
            }
        ]
    }
}
"""


def test_pod_status_in_a_folder_gives_the_container_exit(tmp_path: Path) -> None:
    folder = tmp_path / "captured"
    folder.mkdir()
    (folder / "pod.json").write_text(K8S_53669)
    evidence = evidence_from_paths([str(folder)])
    (record,) = evidence.exits or ()
    assert (record.code, record.signal) == (137, 9)
    assert "pod memcached-0 container memcached (last run): Error" in record.message
    data = scan(folder)
    # killed with SIGKILL and no OOM record anywhere: the rule that says exactly that
    assert cause_ids(data)[0] == "memory.sigkill-no-oom-record"
    named = scan(folder / "pod.json")
    assert cause_ids(named)[0] == "memory.sigkill-no-oom-record"


def test_new_kinds_are_forced_by_name_too() -> None:
    result = invoke(["scan", f"lightning-metrics:{ML / 'lightning-nan' / 'metrics.csv'}", "--format", "json",
                     "--fail-on", "never"])
    assert "numerics.nan-loss-metrics" in cause_ids(json.loads(result.stdout))
    assert REPO.is_dir()
