"""Where the repository, the test data and the fixtures are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FIXTURES = REPO / "fixtures"
