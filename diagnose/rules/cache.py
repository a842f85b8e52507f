"""The parsed rule set, cached on disk, so a run does not re-read ~100 YAML files and
re-validate ~200 regexes (seconds with the pure-Python YAML parser) when nothing changed.

The entry is named by a hash of every input of rules.load_rules: the bytes of every rule file
it would read (so a changed, added or removed rule file is always re-read), the folders
given, and the code that parses them (path, size and mtime of each module of the package,
the Python version). A rule set that fails to load is never cached: the loader runs and
reports its errors. Predicates hold small lambdas, so functions defined inside the package
are pickled as their code and closure values; anything else that cannot be pickled simply
skips the cache.
"""

from __future__ import annotations

import hashlib
import importlib
import marshal
import os
import pickle
import sys
import types
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

from diagnose import diskcache
from diagnose.rules.load import builtin_rules_dir, load_rules
from diagnose.rules.model import RuleSet

_FORMAT = 1


def load_rules_cached(extra_dirs: Sequence[Path] = (), builtin: bool = True) -> RuleSet:
    """rules.load_rules, answered from the cache when its inputs are unchanged."""
    key = _key(extra_dirs, builtin)
    if key is None:
        return load_rules(extra_dirs, builtin)
    name = f"rules-{key}.pickle"
    blob = diskcache.read(name)
    if blob is not None:
        try:
            cached = pickle.loads(blob)
            if isinstance(cached, RuleSet):
                return cached
        except Exception:
            pass  # an unreadable entry is rebuilt below
    ruleset = load_rules(extra_dirs, builtin)
    try:
        out = BytesIO()
        _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(ruleset)
    except Exception:
        return ruleset
    diskcache.write(name, out.getvalue())
    return ruleset


def _key(extra_dirs: Sequence[Path], builtin: bool) -> str | None:
    if not diskcache.enabled():
        return None
    digest = hashlib.sha256()
    digest.update(f"{_FORMAT}|{sys.version}|{builtin}".encode())
    try:
        for path, stat in _walk(Path(__file__).resolve().parent.parent, (".py",)):
            digest.update(f"|{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        folders = ([builtin_rules_dir()] if builtin else []) + [Path(d) for d in extra_dirs]
        for folder in folders:
            if not folder.exists():
                return None  # the loader says what is wrong
            digest.update(f"|folder:{folder.resolve()}".encode())
            # The same files load_rules reads (rules.rule_files), found without pathlib's rglob.
            files = [folder] if folder.is_file() else [path for path, _ in _walk(folder, (".yaml", ".yml"))]
            for path in files:
                digest.update(f"|{path}:".encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    except OSError:
        return None
    return digest.hexdigest()


def _walk(folder: Path, suffixes: tuple[str, ...]) -> list[tuple[Path, os.stat_result]]:
    found: list[tuple[Path, os.stat_result]] = []
    stack = [str(folder)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir():
                    stack.append(entry.path)
                elif entry.name.endswith(suffixes) and entry.is_file():
                    found.append((Path(entry.path), entry.stat()))
    found.sort()
    return found


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType) and "<locals>" in obj.__qualname__:
            if not obj.__module__.startswith("diagnose."):
                raise pickle.PicklingError(f"function from outside the package: {obj.__qualname__}")
            cells = tuple(cell.cell_contents for cell in obj.__closure__ or ())
            return _function, (marshal.dumps(obj.__code__), obj.__module__, obj.__name__, obj.__defaults__, cells)
        return NotImplemented


def _function(code: bytes, module: str, name: str, defaults: tuple[Any, ...] | None, cells: tuple[Any, ...]) -> Any:
    namespace = importlib.import_module(module).__dict__
    closure = tuple(types.CellType(value) for value in cells) or None
    return types.FunctionType(marshal.loads(code), namespace, name, defaults, closure)
