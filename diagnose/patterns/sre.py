"""Python's own regex parser (sre), for reading rule patterns as syntax trees: the hang checks
(regexcheck.py) and the search-pattern builder (prefilter.py) both walk them."""

from __future__ import annotations

import importlib
from typing import Any

try:  # Python 3.11+ moved sre_parse to re._parser (and deprecated the old names)
    parser: Any = importlib.import_module("re._parser")
    constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    parser = importlib.import_module("sre_parse")
    constants = importlib.import_module("sre_constants")
