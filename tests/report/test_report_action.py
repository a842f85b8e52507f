"""The composite GitHub Action (action.yml): its scan step, run with bash the way a runner runs
it (bash -e, GITHUB_OUTPUT, RUNNER_TEMP), keeps the exit-code contract and writes the reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.report import CASES, CI

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
STEPS = {step.get("id") or step["name"]: step for step in ACTION["runs"]["steps"]}


def test_action_shape() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert {"paths", "fail-on", "format"} <= set(ACTION["inputs"])
    assert ACTION["inputs"]["paths"]["required"] is True
    assert ACTION["inputs"]["fail-on"]["default"] == "error"
    install = STEPS["Install diagnose"]["run"]
    assert "pip install" in install and '"$GITHUB_ACTION_PATH"' in install
    upload = STEPS["Upload SARIF"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert "always()" in upload["if"]
    assert STEPS["Fail on findings"]["if"] == "${{ steps.scan.outputs.exit-code == '1' }}"
    # every input reaches the script through env, none is pasted into it
    assert "${{" not in STEPS["scan"]["run"]


def run_scan_step(tmp_path: Path, inputs: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    runner_temp = tmp_path / "runner"
    bin_dir = runner_temp / "diagnose-venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "diagnose"  # stands for the venv the install step makes
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m diagnose "$@"\n')
    wrapper.chmod(0o755)
    script = tmp_path / "scan.sh"
    script.write_text(STEPS["scan"]["run"])
    output = tmp_path / "github_output"
    output.touch()
    env = dict(os.environ)
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.update({"RUNNER_TEMP": str(runner_temp), "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    defaults = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    values = {**defaults, **inputs}
    for name, value in STEPS["scan"]["env"].items():
        input_name = value.removeprefix("${{ inputs.").removesuffix(" }}")
        env[name] = values[input_name]
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc.returncode, proc.stdout + proc.stderr, outputs


def test_crash_is_reported_and_left_for_the_verdict_step(tmp_path: Path) -> None:
    sarif, junit = tmp_path / "d.sarif", tmp_path / "j.xml"
    code, log, outputs = run_scan_step(tmp_path, {
        "paths": " ".join(CASES["oom-cgroup"]), "sarif-file": str(sarif), "junit-file": str(junit)})
    assert code == 0, log  # the upload runs next; the "Fail on findings" step fails the job
    assert outputs["exit-code"] == "1" and outputs["sarif-file"] == str(sarif)
    doc: dict[str, Any] = json.loads(sarif.read_text())
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["memory.host-oom-kill"]
    assert "<testsuites" in junit.read_text()
    assert "::error file=tests/data/ci/oom-cgroup/dmesg.txt,line=79," in log
    assert "`memory.host-oom-kill`" in (tmp_path / "summary.md").read_text()


def test_fail_on_never_and_healthy_give_0(tmp_path: Path) -> None:
    code, log, outputs = run_scan_step(tmp_path, {
        "paths": " ".join(CASES["oom-cgroup"]), "fail-on": "never", "sarif-file": str(tmp_path / "a.sarif")})
    assert (code, outputs["exit-code"]) == (0, "0"), log


def test_one_path_per_line_allows_spaces(tmp_path: Path) -> None:
    spaced = tmp_path / "logs with spaces" / "train.log"
    spaced.parent.mkdir()
    shutil.copy(CI / "healthy" / "train.log", spaced)
    code, log, outputs = run_scan_step(tmp_path, {
        "paths": f"  {spaced}\n{REPO / CASES['healthy'][0]}\n", "sarif-file": str(tmp_path / "h.sarif")})
    assert (code, outputs["exit-code"]) == (0, "0"), log
    assert "2 file(s)" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("paths", ["tests/data/ci/no-such.log", "   "])
def test_tool_error_fails_the_step_and_skips_the_verdict(tmp_path: Path, paths: str) -> None:
    code, log, outputs = run_scan_step(tmp_path, {"paths": paths, "sarif-file": str(tmp_path / "x.sarif")})
    assert code == 2, log
    assert outputs["exit-code"] == "2" and "sarif-file" not in outputs
    assert "::error title=diagnose::" in log
