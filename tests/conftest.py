"""Fixtures every test folder may use (plain helpers are in tests/support/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.engine import finders
from tests.support.cli import run_cli


@pytest.fixture
def cli() -> object:
    return run_cli


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private disk cache, and no hyperscan database remembered from other tests."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("DIAGNOSE_CACHE_DIR", str(folder))
    monkeypatch.delenv("DIAGNOSE_NO_CACHE", raising=False)
    monkeypatch.setattr(finders, "CACHE", finders.FinderCache())
    return folder
