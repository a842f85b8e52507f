"""Python's own regex parser (sre), for reading rule patterns as syntax trees: the hang checks
(regexcheck.py) and the search-pattern builder (prefilter.py) both walk them."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

try:  # Python 3.11+ moved sre_parse to re._parser (and deprecated the old names)
    parser: Any = importlib.import_module("re._parser")
    constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.10
    parser = importlib.import_module("sre_parse")
    constants = importlib.import_module("sre_constants")


def _raw_parser() -> Any:
    """A private copy of sre's parser that keeps alternations as written.

    sre rewrites `(a|ab)` as `a(?:|b)` and `(\\w|\\d)` as `[\\w\\d]`: right for its own engine,
    but `regex` backtracks over the branches as written, and the hang check must see them.
    The copy is its own module object, so `re` itself is untouched.
    """
    spec = importlib.util.spec_from_file_location(parser.__name__ + "_raw", parser.__file__)
    if spec is None or spec.loader is None:  # pragma: no cover - a Python without source files
        return parser
    module: Any = importlib.util.module_from_spec(spec)
    module.__package__ = parser.__package__
    spec.loader.exec_module(module)

    def parse_sub(source: Any, state: Any, verbose: Any, nested: int) -> Any:
        items: list[Any] = []
        while True:
            items.append(module._parse(source, state, verbose, nested + 1, not nested and not items))
            if not source.match("|"):
                break
            if not nested:
                verbose = state.flags & module.SRE_FLAG_VERBOSE
        if len(items) == 1:
            return items[0]
        subpattern = module.SubPattern(state)
        subpattern.append((module.BRANCH, (None, items)))
        return subpattern

    module._parse_sub = parse_sub
    return module


_RAW: Any = None


def raw_parse(pattern: str) -> Any:
    """The sre tree of `pattern` with every alternation kept as a BRANCH of its branches."""
    global _RAW
    if _RAW is None:
        _RAW = _raw_parser()
    return _RAW.parse(pattern)
