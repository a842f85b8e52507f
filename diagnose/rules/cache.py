"""The parsed rule set, cached on disk, so a run does not re-read ~100 YAML files and
re-validate ~200 regexes (seconds with the pure-Python YAML parser) when nothing changed.

The entry is named by a hash of every input of rules.load_rules: the bytes of every rule file
it would read (so a changed, added or removed rule file is always re-read), the folders
given, and the code that parses them (path, size and mtime of each module of the package,
the Python version). A rule set that fails to load is never cached: the loader runs and
reports its errors.

A RuleSet is plain data (predicates too, see predicates.py), pickled with the standard
pickler. A cache entry is never trusted: diskcache only hands back a blob whose HMAC (with a
per-user key kept in the private cache folder) checks out, and the blob is then read by an
unpickler that can only build diagnose's own dataclasses and enums, paths and builtins, so
even a forged entry cannot run code. Anything that fails is rebuilt from the rule files.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import io
import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diagnose import diskcache
from diagnose.rules.load import builtin_rules_dir, load_rules
from diagnose.rules.model import RuleSet

_FORMAT = 2  # 2: predicates as data, standard pickle, restricted unpickler


def load_rules_cached(extra_dirs: Sequence[Path] = (), builtin: bool = True) -> RuleSet:
    """rules.load_rules, answered from the cache when its inputs are unchanged."""
    key = _key(extra_dirs, builtin)
    if key is None:
        return load_rules(extra_dirs, builtin)
    name = f"rules-{key}.pickle"
    blob = diskcache.read(name)
    if blob is not None:
        cached = loads(blob)
        if cached is not None:
            return cached
    ruleset = load_rules(extra_dirs, builtin)
    try:
        data = pickle.dumps(ruleset, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a rule holding something unpicklable: just no cache
        return ruleset
    diskcache.write(name, data)
    return ruleset


def loads(blob: bytes) -> RuleSet | None:
    """The RuleSet in a cache blob, or None for anything else (never raises)."""
    try:
        cached = _RestrictedUnpickler(io.BytesIO(blob)).load()
    except Exception:
        return None
    return cached if isinstance(cached, RuleSet) else None


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


# What a cached RuleSet is made of besides diagnose's own dataclasses and enums.
_ALLOWED = {
    ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"), ("pathlib", "PureWindowsPath"),
    ("builtins", "frozenset"), ("builtins", "set"), ("builtins", "tuple"), ("builtins", "list"), ("builtins", "dict"),
    ("builtins", "str"), ("builtins", "int"), ("builtins", "float"), ("builtins", "bool"), ("builtins", "bytes"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds only plain data: a pickle naming os.system, eval, a function or any other
    callable is refused before anything is called."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if (module == "diagnose" or module.startswith("diagnose.")) and "." not in name and not name.startswith("_"):
            # Only names already imported: looking one up must not import (run) a module.
            found = getattr(sys.modules.get(module), name, None)
            if isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a cached rule set")
