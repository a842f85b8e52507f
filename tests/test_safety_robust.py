"""Hostile or broken inputs end in a gap or one clear usage error, never an internal error
(issue item 7): malformed captures, deep and looping folders, unreadable folders, absurd run ids."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diagnose.evidence.parsers.tmux import parse_tmux
from tests.conftest import FIXTURES, REPO, run_cli

SAMPLES = REPO / "tests" / "data" / "samples"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB\n"


def _no_internal_error(result: subprocess.CompletedProcess[str]) -> None:
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr


# ---------------------------------------------------------------- parsers: a gap naming the source


def test_malformed_xml_is_a_gap_and_the_rest_is_still_diagnosed(tmp_path: Path) -> None:
    xml = (SAMPLES / "h200" / "nvidia-smi-q.xml").read_text()
    (tmp_path / "nvidia-smi-q.xml").write_text(xml[:3000])  # cut mid-element, as a killed nvidia-smi leaves it
    (tmp_path / "train.log").write_text(OOM)
    result = run_cli(["scan", ".", "--format", "json"], cwd=tmp_path)
    _no_internal_error(result)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert [c["id"] for c in report["causes"]] == ["memory.cuda-oom"]
    (gap,) = [g for g in report["gaps"] if g["source"] == "gpu"]
    assert gap["reason"].startswith("nvidia-smi-q.xml: nvidia-smi -q -x: malformed XML at line 86, column ")


def test_nvml_json_of_wrong_types_reads_as_unknown(tmp_path: Path) -> None:
    data = json.loads((SAMPLES / "h200" / "nvml-busy.json").read_text())
    gpu = data["gpus"][0]
    gpu.update(index="zero", temp=True, mem=[1, 2], procs=[{"pid": "abc"}, {"pid": 7, "usedGpuMemory": 1e400}],
               throttle_reasons=[1, None, "sw_power_cap"], remapped_rows={"pending": "yes"})
    data["driver"] = 580
    (tmp_path / "nvml.json").write_text(json.dumps(data).replace("Infinity", "1e999"))
    result = run_cli(["scan", ".", "--format", "json"], cwd=tmp_path)
    _no_internal_error(result)
    assert result.returncode == 0


def test_tmux_pane_status_minus_minus_one() -> None:
    capture = {"socket": "/tmp/tmux-0/default", "socket_exists": True,
               "list_sessions": {"rc": 0, "stdout": "train\n", "stderr": ""},
               "list_panes": {"rc": "0", "stdout": "train\ttrain:0.0\t1\t--1\tpython\t²\t--1\n", "stderr": ""}}
    state = parse_tmux(capture, "train")
    (pane,) = state.sessions[0].panes
    assert pane.dead and pane.dead_status is None and pane.dead_signal is None and pane.pid is None
    # the whole capture of the wrong shape: unknown, not an exception
    assert parse_tmux({"list_sessions": [], "list_panes": "x", "socket_exists": "yes"}, None).sessions == ()


def test_bundle_with_a_garbled_tmux_capture_is_diagnosed(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURES / "seed-flex7-tmux-died", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["tmux"]["list_sessions"] = {"rc": 0, "stdout": "train\n", "stderr": ""}
    manifest["tmux"]["list_panes"] = {"rc": 0, "stdout": "train\ttrain:0.0\t1\t--1\tpython\t\t--1\n", "stderr": ""}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli([str(bundle), "--format", "json", "--fail-on", "never"], cwd=tmp_path)
    _no_internal_error(result)
    assert result.returncode == 0


# ---------------------------------------------------------------- folder walks


def _make_deep(top: Path, depth: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`depth` nested folders `d`, a log at the bottom (built by chdir: the path outgrows PATH_MAX)."""
    monkeypatch.chdir(top)
    for _ in range(depth):
        os.mkdir("d")
        os.chdir("d")
    Path("bottom.log").write_text(OOM)
    monkeypatch.undo()


def _remove_deep(top: Path, depth: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # shutil.rmtree recurses too (and pytest's tmp cleanup with it): take it down from the bottom.
    monkeypatch.chdir(top)
    for _ in range(depth):
        os.chdir("d")
    os.remove("bottom.log")
    for _ in range(depth):
        os.chdir("..")
        os.rmdir("d")
    monkeypatch.undo()


def test_a_1500_deep_folder_is_walked_to_the_cap_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_deep(tmp_path, 1500, monkeypatch)
    try:
        alone = run_cli(["scan", "d"], cwd=tmp_path)
        _no_internal_error(alone)
        assert alone.returncode == 2
        # d holds 64 walked levels; the 65th is where the walk stops
        assert alone.stderr == "diagnose: error: d: nothing to scan: skipped d" + "/d" * 65 + "/: deeper than 64 folders\n"
        (tmp_path / "top.log").write_text(OOM)
        mixed = run_cli(["scan", ".", "--format", "json"], cwd=tmp_path)
        _no_internal_error(mixed)
        assert mixed.returncode == 1
        assert [c["id"] for c in json.loads(mixed.stdout)["causes"]] == ["memory.cuda-oom"]
        assert "skipped d" + "/d" * 64 + "/: deeper than 64 folders" in mixed.stdout  # from ".", d is level 1
        rules = run_cli(["scan", "top.log", "--rules", "d"], cwd=tmp_path)  # rule folders are walked too
        _no_internal_error(rules)
        assert rules.returncode == 1
    finally:
        _remove_deep(tmp_path, 1500, monkeypatch)


def test_a_symlink_loop_is_called_a_symlink_loop(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "train.log").write_text(OOM)
    os.symlink("self", tmp_path / "logs" / "self")
    os.symlink("b", tmp_path / "logs" / "a")
    os.symlink("a", tmp_path / "logs" / "b")
    os.symlink("..", tmp_path / "logs" / "up")  # a link to an ancestor: not followed, not walked forever
    os.symlink("missing", tmp_path / "logs" / "dangling")
    direct = run_cli(["scan", "logs/self"], cwd=tmp_path)
    assert (direct.returncode, direct.stderr) == (2, "diagnose: error: logs/self: symlink loop\n")
    walked = run_cli(["scan", "logs"], cwd=tmp_path)
    _no_internal_error(walked)
    assert walked.returncode == 1
    for line in ("note: skipped logs/self: symlink loop", "note: skipped logs/a: symlink loop",
                 "note: skipped logs/dangling: dangling symlink"):
        assert line in walked.stdout
    assert "permission denied" not in walked.stdout


def _without_dac_override() -> list[str]:
    """A command prefix under which permissions apply to us: root reads anything, so as root the
    CLI runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped (still uid 0)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a folder unreadable to us")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


def _run_restricted(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), DIAGNOSE_CACHE_DIR=str(cwd / ".cache"))
    return subprocess.run([*_without_dac_override(), sys.executable, "-m", "diagnose", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_unreadable_folders_are_permission_denied(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "locked").mkdir(parents=True)
    (logs / "train.log").write_text(OOM)
    (logs / "locked" / "rank1.log").write_text(OOM)
    (logs / "secret.log").write_text(OOM)
    os.chmod(logs / "secret.log", 0)
    os.chmod(logs / "locked", 0)
    try:
        walked = _run_restricted(["scan", "logs"], tmp_path)
        _no_internal_error(walked)
        assert walked.returncode == 1
        assert "note: skipped logs/locked/: permission denied" in walked.stdout
        assert "note: skipped logs/secret.log: permission denied" in walked.stdout
        for args in (["scan", "logs/locked"], ["logs/locked"]):  # scanned, or given as a bundle
            direct = _run_restricted(args, tmp_path)
            assert (direct.returncode, direct.stderr) == (2, "diagnose: error: logs/locked: permission denied\n")
    finally:
        os.chmod(logs / "locked", 0o755)


# ---------------------------------------------------------------- run ids


@pytest.mark.parametrize(("run_id", "message"), [
    ("a" * 131_000, "diagnose: error: " + "a" * 60 + "…: not a run id (131,000 characters; a run id has at most 200)\n"),
    ("a" * 201, "diagnose: error: " + "a" * 60 + "…: not a run id (201 characters; a run id has at most 200)\n"),
    ("flex7\n::error::x", "diagnose: error: flex7\\x0a::error::x: not a run id (it holds a NUL byte or a line break)\n"),
    ("flex7\rx", "diagnose: error: flex7\\x0dx: not a run id (it holds a NUL byte or a line break)\n"),
])
@pytest.mark.parametrize("command", [[], ["collect"]])
def test_absurd_run_ids_are_usage_errors(tmp_path: Path, run_id: str, message: str, command: list[str]) -> None:
    args = [*command, run_id] + (["-o", str(tmp_path / "out")] if command else [])
    result = run_cli(args, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, message)


def test_a_200_character_run_id_is_a_run_id(tmp_path: Path) -> None:
    result = run_cli(["r" * 200, "--dir", str(tmp_path)], cwd=tmp_path)
    assert result.returncode == 2
    assert "relates to this run id" in result.stderr
