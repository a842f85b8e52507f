"""diagnose never runs a program that a file in the searched folders names (a wandb-metadata.json
`executable`, a .venv/bin/python in the run's folder): such a file could be planted by anyone
who can write there, and diagnose often runs as root. Package versions are then read from
files instead (wandb's requirements.txt, *.dist-info/METADATA); only the run's own interpreter
(configured, or a live process's, when nobody else can change it) is ever run."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.live.collectors.packages import _only_we_can_change
from tests.support.cli import run_cli
from tests.support.live import collect, empty_config
from tests.support.paths import DATA

RUNS = DATA / "runs"


def _marker_script(path: Path, marker: Path) -> Path:
    """An 'interpreter' that only proves it ran."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch {marker}\necho '[]'\n")
    path.chmod(0o755)
    subprocess.run([str(path)], check=True, capture_output=True)  # it really runs when run
    assert marker.exists()
    marker.unlink()
    return path


def _dist_info(site: Path, name: str, version: str) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nbody\nName: not-this\n")


def _plant_metadata(files: Path, executable: Path) -> None:
    (files / "wandb-metadata.json").write_text(json.dumps({"executable": str(executable), "startedAt": "2026-11-30T05:03:33Z"}))


def _collect_cli(run_id: str, work: Path, tmp_path: Path) -> dict[str, object]:
    (tmp_path / "diagnose.toml").write_text('[collect]\nskip = ["dmesg", "gpu", "tmux"]\n')
    out = tmp_path / f"bundle-{len(list(tmp_path.glob('bundle-*')))}"
    result = run_cli(["collect", run_id, "--dir", str(work), "-o", str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest: dict[str, object] = json.loads((out / "manifest.json").read_text())
    manifest["_bundle"] = str(out)
    return manifest


def _packages_file(manifest: dict[str, object]) -> dict[str, object]:
    files = manifest["files"]
    assert isinstance(files, list)
    (entry,) = [f for f in files if f["kind"] == "packages"]
    return dict(entry)


def test_a_planted_wandb_executable_is_never_run_and_requirements_are_read(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    shutil.copytree(RUNS / "wandb-offline-flex7w", work)
    files = next((work / "wandb").glob("offline-run-*-flex7w")) / "files"
    marker = tmp_path / "ran-as-root"
    evil = _marker_script(tmp_path / "evil" / "python", marker)
    _plant_metadata(files, evil)

    (tmp_path / "diagnose.toml").write_text('[collect]\nskip = ["dmesg", "gpu", "tmux"]\n')
    result = run_cli(["flex7w", "--dir", str(work), "--format", "json"], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["causes"][0]["id"] == "unrecognised.crash"
    assert not marker.exists()

    manifest = _collect_cli("flex7w", work, tmp_path)
    assert not marker.exists()
    entry = _packages_file(manifest)
    assert entry["path"] == "env/requirements.txt"
    run = manifest["run"]
    assert isinstance(run, dict)
    assert run["wandb_python"] == str(evil)  # reported as a fact
    assert "python" not in run
    assert any(f"wandb recorded interpreter {evil}" in note and "not run" in note for note in run["notes"])


def _traceback_log(log: Path, site: Path) -> None:
    """A real traceback through a package in `site`, printed by a real Python."""
    package = site / "torchish"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "step.py").write_text("def step():\n    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n")
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import torchish.step; torchish.step.step()"
    with log.open("w") as handle:
        subprocess.run([sys.executable, "-c", code], stderr=handle, stdout=handle, check=False)
    assert f"{site}/torchish/step.py" in log.read_text()


def test_without_requirements_the_environment_is_read_not_run(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    files = work / "wandb" / "run-20261130_050333-flex9d" / "files"
    files.mkdir(parents=True)
    marker = tmp_path / "ran-as-root"
    env = tmp_path / "recorded-env"
    evil = _marker_script(env / "bin" / "python", marker)
    _dist_info(env / "lib" / "python3.11" / "site-packages", "wandb", "0.19.1")
    _plant_metadata(files, evil)
    # The traceback's environment is the one that ran: it wins over what wandb recorded.
    traced = tmp_path / "traced-env" / "lib" / "python3.11" / "site-packages"
    _dist_info(traced, "torch", "2.4.0")
    _dist_info(traced, "flash-attn", "2.6.3")
    _traceback_log(files / "output.log", traced)

    manifest = _collect_cli("flex9d", work, tmp_path)
    assert not marker.exists()
    entry = _packages_file(manifest)
    assert entry["origin"] == f"{traced} (dist-info, named by a traceback in the run's log)"
    listing = json.loads((Path(str(manifest["_bundle"])) / str(entry["path"])).read_text())
    assert listing == [{"name": "flash-attn", "version": "2.6.3"}, {"name": "torch", "version": "2.4.0"}]

    shutil.rmtree(tmp_path / "traced-env")
    manifest = _collect_cli("flex9d", work, tmp_path)
    assert not marker.exists()
    entry = _packages_file(manifest)
    assert entry["origin"] == f"{env}/lib/python3.11/site-packages (dist-info, environment of the interpreter wandb recorded)"
    listing = json.loads((Path(str(manifest["_bundle"])) / str(entry["path"])).read_text())
    assert listing == [{"name": "wandb", "version": "0.19.1"}]


def test_a_venv_in_the_runs_folder_is_read_not_run(tmp_path: Path) -> None:
    work = tmp_path / "proj"
    work.mkdir()
    subprocess.run([sys.executable, "-c", "print('step 1'); raise SystemExit('boom')"], cwd=work,
                   stdout=(work / "train_flex9v.log").open("w"), stderr=subprocess.STDOUT, check=False)
    marker = tmp_path / "ran-as-root"
    _marker_script(work / ".venv" / "bin" / "python", marker)
    _dist_info(work / ".venv" / "lib" / "python3.11" / "site-packages", "deepspeed", "0.15.0")
    collection = collect("flex9v", empty_config(), [work], only=("packages",))
    assert not marker.exists()
    packages = collection.evidence().packages
    assert packages is not None and packages.versions == {"deepspeed": "0.15.0"}
    assert "(dist-info, .venv in the run's directory)" in packages.source


def test_a_live_process_of_the_run_is_asked_with_its_own_interpreter(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--run", "flex9p"], cwd=tmp_path)
    try:
        collection = collect("flex9p", empty_config(), [tmp_path], only=("packages",))
    finally:
        proc.kill()
        proc.wait()
    packages = collection.evidence().packages
    assert packages is not None, collection.manifest.collectors["packages"].reason
    assert collection.manifest.run["python_source"] == f"interpreter of the run's process {proc.pid}"
    assert packages.versions["regex"] == importlib.metadata.version("regex")  # the venv's, not the base Python's


def test_only_binaries_nobody_else_can_change_count_as_safe(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    binary = folder / "python3"
    shutil.copy(sys.executable, binary)
    folder.chmod(0o755)
    binary.chmod(0o755)
    assert _only_we_can_change(str(binary))  # under /tmp (sticky, 1777): still ours
    folder.chmod(0o775)
    assert not _only_we_can_change(str(binary))
    folder.chmod(0o755)
    binary.chmod(0o757)
    assert not _only_we_can_change(str(binary))
    binary.chmod(0o755)
    link = tmp_path / "python"
    link.symlink_to(binary)
    assert _only_we_can_change(str(link))
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the file to another user")
    os.chown(binary, 65534, 65534)
    assert not _only_we_can_change(str(binary)) and not _only_we_can_change(str(link))
