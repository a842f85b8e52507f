"""The wheel carries every subpackage, the schema and the built-in rule pack (a non-editable
install must work: the README quick start uses one)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_built_wheel_holds_code_rules_and_schema(tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                           capture_output=True, text=True, timeout=600)
    if build.returncode != 0 and "No matching distribution" in build.stderr:
        pytest.skip("needs the build backend (setuptools) from the package index")
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("diagnose-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(REPO)) for p in (REPO / "diagnose").rglob("*.py")}
    assert modules - names == set()
    rules = {f"diagnose/builtin_rules/{p.relative_to(REPO / 'rules')}" for p in (REPO / "rules").rglob("*.yaml")}
    assert rules and rules - names == set()
    assert "diagnose/schema/diagnosis.schema.json" in names
    assert "diagnose/schema/bundle-manifest.schema.json" in names  # read_manifest needs it at run time
