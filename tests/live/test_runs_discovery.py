"""A RUN_ID without config: files and folders named after it, wandb run folders, torchelastic
error files, and a clear 'where I looked' when there is nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.live.discovery import resolve
from diagnose.live.runs import run_name_pattern
from tests.support.cli import run_cli
from tests.support.live import collect, empty_config
from tests.support.paths import DATA

RUNS = DATA / "runs"


def touch(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_run_name_is_a_whole_word() -> None:
    pattern = run_name_pattern("flex7")
    assert pattern.search("train_flex7.log") and pattern.search("flex7") and pattern.search("flex7-rank0.log")
    assert not pattern.search("flex70.log") and not pattern.search("reflex7.log")


def test_logs_and_run_folders_found_by_name(tmp_path: Path) -> None:
    touch(tmp_path / "train_flex7.log")
    touch(tmp_path / "a" / "b" / "flex7-eval.out")
    touch(tmp_path / "flex7" / "rank0.log")
    touch(tmp_path / "flex7" / "rank1.log")
    touch(tmp_path / "flex7" / "checkpoints" / "step_10.pt")
    touch(tmp_path / "flex7" / "checkpoints" / "notes.log")  # inside checkpoints: not a log of the run
    touch(tmp_path / "flex70.log")
    touch(tmp_path / ".cache" / "flex7.log")
    touch(tmp_path / "env" / "pyvenv.cfg")
    touch(tmp_path / "env" / "flex7.log")
    touch(tmp_path / "train_flex7.pt")
    spec = resolve("flex7", empty_config(), [tmp_path])
    assert sorted(spec.logs) == sorted(str(p) for p in (
        tmp_path / "train_flex7.log", tmp_path / "a" / "b" / "flex7-eval.out", tmp_path / "flex7" / "rank0.log",
        tmp_path / "flex7" / "rank1.log"))
    assert spec.checkpoint_dir == str(tmp_path / "flex7" / "checkpoints")
    assert not spec.configured and spec.expected_logs is None
    evidence = collect("flex7", empty_config(), [tmp_path], only=("logs",)).evidence()
    ranks = {Path(t.path).name: t.rank for t in evidence.texts}
    assert ranks["rank0.log"] == 0 and ranks["rank1.log"] == 1 and ranks["train_flex7.log"] is None


def test_a_saved_bundle_named_after_the_run_is_not_read_as_its_logs(tmp_path: Path) -> None:
    touch(tmp_path / "flex7-bundle" / "manifest.json", "{}")
    touch(tmp_path / "flex7-bundle" / "logs" / "x" / "train_flex7.log")
    spec = resolve("flex7", empty_config(), [tmp_path])
    assert spec.logs == []
    assert any("looks like a saved bundle" in note for note in spec.notes)


def test_wandb_offline_run_folder(tmp_path: Path) -> None:
    shutil.copytree(RUNS / "wandb-offline-flex7w", tmp_path / "proj")
    work = tmp_path / "proj"
    spec = resolve("flex7w", empty_config(), [work])
    folder = next((work / "wandb").glob("offline-run-*-flex7w"))
    assert spec.wandb_dirs == [str(folder)]
    assert spec.logs == [str(folder / "files" / "output.log")]
    assert spec.requirements == [str(folder / "files" / "requirements.txt")]
    assert spec.started_at is not None  # from the first timestamped line of output.log
    # No interpreter is known, so the packages come from wandb's requirements.txt.
    evidence = collect("flex7w", empty_config(), [work], only=("logs", "packages")).evidence()
    assert evidence.packages is not None and evidence.packages.versions["urllib3"] == "2.8.0"
    # A config with no [run]: still discovery. Without dmesg: this machine's kernel log may hold
    # other tests' OOM kills from around the time this run's log was written.
    (tmp_path / "diagnose.toml").write_text('[collect]\nskip = ["dmesg"]\n')
    result = run_cli(["flex7w", "--dir", str(work), "--format", "json"], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "unrecognised.crash"
    assert "ValueError: step 2: loss is nan" in data["causes"][0]["title"]


def test_wandb_metadata_gives_interpreter_and_start(tmp_path: Path) -> None:
    folder = tmp_path / "wandb" / "run-20260211_121423-kj3gdsjx"
    (folder / "files").mkdir(parents=True)
    shutil.copy(RUNS / "wandb-online-metadata" / "wandb-metadata.json", folder / "files")
    spec = resolve("kj3gdsjx", empty_config(), [tmp_path])
    assert spec.wandb_dirs == [str(folder)]
    # The interpreter wandb recorded is a fact to report, never one to run.
    assert spec.python is None
    assert spec.wandb_python == "/home/hqh/anaconda3/envs/Wenhao/bin/python"
    assert spec.wandb_python_source.endswith("wandb-metadata.json executable")
    assert spec.started_at == pytest.approx(1770786747.766969)
    # Nothing readable beside it on this machine: a gap that says so, not a crash.
    collection = collect("kj3gdsjx", empty_config(), [tmp_path], only=("packages",))
    reason = collection.manifest.collectors["packages"].reason or ""
    assert "wandb recorded interpreter /home/hqh/anaconda3/envs/Wenhao/bin/python, not run" in reason
    assert collection.manifest.run["wandb_python"] == "/home/hqh/anaconda3/envs/Wenhao/bin/python"


def test_torchelastic_error_file_in_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path / "tmp"
    shutil.copytree(RUNS / "torchelastic-flex7e" / "torchelastic_dip4ry8q", tmp / "torchelastic_dip4ry8q")
    monkeypatch.setenv("TMPDIR", str(tmp))
    work = tmp_path / "work"
    work.mkdir()
    spec = resolve("flex7e", empty_config(), [work])
    error = tmp / "torchelastic_dip4ry8q" / "flex7e_hmz07rgw" / "attempt_0" / "1" / "error.json"
    assert spec.error_files == [str(error)]
    assert spec.launcher == "torchrun"
    evidence = collect("flex7e", empty_config(), [work], only=("logs",)).evidence()
    assert evidence.exits is not None
    (record,) = evidence.exits
    assert (record.rank, record.code) == (1, 1)
    assert "checkpoint shard 1 has shape" in record.message


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    touch(tmp_path / "notes.txt")  # nothing of the same shape: no sibling says a run flex7 was expected
    result = run_cli(["flex7", "--dir", str(tmp_path)], cwd=tmp_path, env={"TMUX_TMPDIR": str(tmp_path)})
    assert result.returncode == 2
    assert "flex7: no file, process, tmux session or launch record relates to this run id" in result.stderr
    assert f"{tmp_path} (names containing 'flex7'" in result.stderr
    assert f"{tmp_path}/wandb/*-flex7" in result.stderr
    assert "torchelastic_*/flex7_*" in result.stderr
    collect_result = run_cli(["collect", "flex7", "--dir", str(tmp_path), "-o", str(tmp_path / "out")], cwd=tmp_path,
                             env={"TMUX_TMPDIR": str(tmp_path)})
    assert collect_result.returncode == 2 and not (tmp_path / "out").exists()


def test_a_running_process_is_enough_to_find_the_run(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--run-name", "flex7p"])
    try:
        result = run_cli(["flex7p", "--dir", str(tmp_path), "--format", "json", "--fail-on", "never"], cwd=tmp_path,
                         env={"TMUX_TMPDIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["run"]["id"] == "flex7p"
    finally:
        proc.kill()
        proc.wait()


def test_without_dir_a_live_run_is_found_where_it_works(tmp_path: Path) -> None:
    """No --dir, diagnose started in another folder: the live process that names the run works in
    its own folder, and that folder is searched too (its log found there)."""
    work, elsewhere = tmp_path / "runs" / "exp4", tmp_path / "home"
    log = touch(work / "train_flex7q.log", "step 1 loss 2.0\n")
    elsewhere.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--run-name", "flex7q"], cwd=work)
    try:
        result = run_cli(["flex7q", "--format", "json", "--fail-on", "never"], cwd=elsewhere,
                         env={"TMUX_TMPDIR": str(tmp_path)})
        assert result.returncode == 0, result.stderr
        logs = json.loads(result.stdout)["run"]["logs"]
        assert any(entry["path"] == str(log) and entry["exists"] for entry in logs), logs
    finally:
        proc.kill()
        proc.wait()
