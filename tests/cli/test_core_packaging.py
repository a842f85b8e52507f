"""The wheel carries every subpackage, the schema and the built-in rule pack (a non-editable
install must work: the README quick start uses one); it is published as diagnose-ml, with an
SPDX license, and installs with pipx into a command that says its version."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import diagnose
from tests.support.paths import REPO

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "diagnose").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_distribution_name_license_and_one_version() -> None:
    project = PYPROJECT["project"]
    # "diagnose" on PyPI is an unrelated project; the import package and the command keep the name.
    assert project["name"] == diagnose.DISTRIBUTION == "diagnose-ml"
    assert project["scripts"] == {"diagnose": "diagnose.cli:main"}
    assert project["license"] == "Apache-2.0"  # an SPDX string, not the table that stops building in 2027
    assert "License ::" not in " ".join(project["classifiers"])  # PEP 639: the SPDX string replaces them
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0, January 2004" in (REPO / "LICENSE").read_text()
    requires = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires), requires
    # the version is written once, in diagnose/__init__.py
    assert "version" not in project and project["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "diagnose.__version__"}
    assert project["urls"]["Homepage"] == diagnose.HOMEPAGE


def test_version_is_shown_everywhere() -> None:
    from tests.support.report import CASES, invoke

    shown = invoke(["--version"])
    assert shown.exit_code == 0 and shown.stdout.strip() == f"diagnose, version {diagnose.__version__}"
    report = invoke(["scan", *CASES["oom-cgroup"], "--format", "json", "--fail-on", "never"])
    assert json.loads(report.stdout)["tool"] == {"name": "diagnose", "version": diagnose.__version__}
    sarif = json.loads(invoke(["scan", *CASES["oom-cgroup"], "--format", "sarif", "--fail-on", "never"]).stdout)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert driver["version"] == driver["semanticVersion"] == diagnose.__version__


def build_wheel(out: Path) -> Path:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "No matching distribution" in build.stderr:
        pytest.skip("needs the build backend (setuptools>=77) from the package index")
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = out.glob("diagnose_ml-*.whl")
    return wheel


@pytest.mark.slow
def test_built_wheel_holds_code_rules_and_schema(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    assert wheel.name.startswith(f"diagnose_ml-{diagnose.__version__}-py3-none-any")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(REPO)) for p in (REPO / "diagnose").rglob("*.py")}
    assert modules - names == set()
    rules = {f"diagnose/builtin_rules/{p.relative_to(REPO / 'rules')}" for p in (REPO / "rules").rglob("*.yaml")}
    assert rules and rules - names == set()
    assert "diagnose/schema/diagnosis.schema.json" in names
    assert "diagnose/schema/bundle-manifest.schema.json" in names  # read_manifest needs it at run time
    metadata = zipfile.ZipFile(wheel).read(f"diagnose_ml-{diagnose.__version__}.dist-info/METADATA").decode()
    assert "Name: diagnose-ml" in metadata and f"Version: {diagnose.__version__}" in metadata
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata
    assert f"diagnose_ml-{diagnose.__version__}.dist-info/licenses/LICENSE" in names


@pytest.mark.slow
def test_wheel_installs_with_pipx_and_says_its_version(tmp_path: Path) -> None:
    pipx = shutil.which("pipx", path=str(Path(sys.executable).parent)) or shutil.which("pipx")
    if pipx is None:
        pytest.skip("pipx is not installed (pip install pipx; it is in the test extras)")
    wheel = build_wheel(tmp_path / "dist")
    home, bin_dir = tmp_path / "pipx-home", tmp_path / "pipx-bin"
    env = {**os.environ, "PIPX_HOME": str(home), "PIPX_BIN_DIR": str(bin_dir), "PIPX_MAN_DIR": str(tmp_path / "man"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)  # the installed command must run from its own venv, not this checkout
    install = subprocess.run([pipx, "install", "--python", sys.executable, str(wheel)], env=env,
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    command = bin_dir / "diagnose"
    assert command.exists()
    shown = subprocess.run([str(command), "--version"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"diagnose, version {diagnose.__version__}"
    # the installed command carries its rule pack: a scan of a real kernel log finds the OOM kill
    dmesg = REPO / "tests" / "data" / "ci" / "oom-cgroup" / "dmesg.txt"
    scan = subprocess.run([str(command), "scan", str(dmesg), "--format", "json"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert scan.returncode == 1, scan.stderr
    assert json.loads(scan.stdout)["causes"][0]["id"] == "memory.host-oom-kill"
