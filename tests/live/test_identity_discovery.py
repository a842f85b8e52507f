"""Identity without a config: expected logs from siblings, did-you-mean, never-started bundles."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from diagnose.errors import InputError
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.evidence.facts import ExpectedLog, RunIdentity, RunProcess
from diagnose.live.discovery import resolve
from diagnose.live.runs import id_skeleton
from tests.support.cli import run_cli
from tests.support.identity import identity_of
from tests.support.live import collect, empty_config


def touch(path: Path, text: str = "", age: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age:
        moment = time.time() - age
        os.utime(path, (moment, moment))
    return path


def test_skeleton_varies_only_the_digits() -> None:
    skeleton = id_skeleton("flex7")
    assert skeleton is not None
    assert skeleton.search("train_flex6.log") and skeleton.search("flex123")
    assert not skeleton.search("flex6b.log") and not skeleton.search("reflex6.log")
    assert id_skeleton("baseline") is None


def test_expected_log_inferred_from_siblings(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex6.log", "step 1\n", age=3600)
    touch(tmp_path / "train_flex5.log", "step 1\n", age=7200)
    touch(tmp_path / "runs" / "flex6" / "train.log", "x\n")
    touch(tmp_path / "logs" / "flex6.out", "x\n")
    spec = resolve("flex7", empty_config(), [tmp_path])
    expected = spec.expected_logs or []
    assert str(tmp_path / "train_flex7.log") == expected[0]  # two siblings: the likeliest shape first
    assert set(expected[1:]) <= {str(tmp_path / "runs" / "flex7" / "train.log"), str(tmp_path / "logs" / "flex7.out")}
    source, basis = spec.log_sources[expected[0]]
    assert source == "inferred" and basis == "train_flex6.log, train_flex5.log differ only by the run id"
    assert spec.window_hint is not None and spec.window_hint[1].startswith("sibling mtime")


def test_no_inference_when_the_run_wrote_its_log(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex7.log", "step 1\n")
    touch(tmp_path / "eval_flex6.log", "x\n")  # an older run's other log must not make flex7 look half-started
    spec = resolve("flex7", empty_config(), [tmp_path])
    assert spec.logs == [str(tmp_path / "train_flex7.log")] and spec.expected_logs is None


def test_inferred_log_is_an_expected_file_fact(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex6.log", "step 1\n")
    evidence = collect("flex7", empty_config(), [tmp_path], only=("logs",)).evidence()
    assert evidence.files is not None
    (missing,) = evidence.files
    assert (missing.role, missing.exists, missing.siblings) == ("log", False, ("train_flex6.log",))
    assert evidence.identity is not None
    (log,) = evidence.identity.logs
    assert (log.path, log.exists, log.source) == (str(tmp_path / "train_flex7.log"), False, "inferred")


def test_checkpoint_dir_beside_the_log(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex7.log", "step 1\n")
    (tmp_path / "out" / "checkpoint-500").mkdir(parents=True)
    spec = resolve("flex7", empty_config(), [tmp_path])
    assert spec.checkpoint_dir == str(tmp_path / "out")


def test_interpreter_from_the_traceback(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex7.log", 'Traceback (most recent call last):\n'
          '  File "/opt/envs/t/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in f\n'
          'RuntimeError: boom\n')
    identity = identity_of(collect("flex7", empty_config(), [tmp_path], only=("logs",)))
    assert identity.interpreter is not None
    assert identity.interpreter.path == "/opt/envs/t/bin/python"
    assert identity.interpreter.source.startswith("traceback site-packages in train_flex7.log")
    assert identity.last_output is not None and identity.last_output.line == "RuntimeError: boom"
    assert identity.window.end_source == "last write"


def test_did_you_mean_exit_2(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex7.log", "step 1\n")
    result = run_cli(["flx7", "--dir", str(tmp_path)], cwd=tmp_path, env={"TMUX_TMPDIR": str(tmp_path)})
    assert result.returncode == 2, result.stderr
    assert ("flx7: no file, process, tmux session or launch record relates to this run id; "
            "did you mean flex7? train_flex7.log is here") in result.stderr


def test_collect_of_a_never_started_run_keeps_the_expected_log(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex6.log", "step 1\n", age=600)
    touch(tmp_path / "train_flex5.log", "step 1\n", age=1200)
    out = tmp_path / "bundle"
    result = run_cli(["collect", "flex7", "--dir", str(tmp_path), "-o", str(out)], cwd=tmp_path,
                     env={"TMUX_TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    (log,) = manifest["identity"]["logs"]
    assert log == {"path": str(tmp_path / "train_flex7.log"), "exists": False, "size": None, "mtime": None,
                   "source": "inferred", "basis": "train_flex6.log, train_flex5.log differ only by the run id"}
    evidence = evidence_from_bundle(out)
    assert evidence.identity is not None and evidence.identity.logs == (ExpectedLog.from_json(log),)
    assert evidence.files is not None and evidence.files[0].siblings == ("train_flex6.log", "train_flex5.log")
    report = run_cli([str(out), "--format", "json", "--fail-on", "never"], cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    if isinstance(data.get("run"), dict) and "logs" in data["run"]:  # the report side shows the identity as `run`
        assert data["run"]["logs"][0]["path"] == str(tmp_path / "train_flex7.log")
        assert data["run"]["logs"][0]["source"] == "inferred"


def test_identity_json_round_trip() -> None:
    identity = RunIdentity("flex7", "box", collected_at=1.5, cgroups=("/x",), inferred=("a",),
                           processes=(RunProcess(1, 0, "python3", "python3 t.py", True, "command line names the run",
                                                 "/x", 1.0, "S", 0.5, None),),
                           logs=(ExpectedLog("/w/t.log", False, source="inferred", basis="b"),))
    assert RunIdentity.from_json(json.loads(json.dumps(identity.to_json()))) == identity


@pytest.mark.parametrize("bad", [
    {"id": 7}, {"id": "x", "logs": {}}, {"id": "x", "logs": [{"path": "/a", "exists": "yes"}]},
    {"id": "x", "processes": [{"pid": "1"}]}, {"id": "x", "launcher": {"kind": "rm -rf"}},
    {"id": "x", "window": []}, {"id": "x", "logs": [{"path": "/a", "exists": False, "source": "guess"}]},
])
def test_hostile_identity_is_a_clear_error(tmp_path: Path, bad: object) -> None:
    from diagnose.evidence.bundle import FORMAT, SCHEMA_VERSION

    (tmp_path / "manifest.json").write_text(json.dumps({"format": FORMAT, "schema_version": SCHEMA_VERSION,
                                                        "run": {"id": "x"}, "identity": bad}))
    with pytest.raises(InputError, match=r"manifest\.json: identity"):
        evidence_from_bundle(tmp_path)
