"""Load and validate YAML rules. Every problem of every file is reported at once, with
file:line, before any work starts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diagnose.errors import RuleError
from diagnose.rules.model import Rule, RuleSet

if TYPE_CHECKING:
    from diagnose.rules.yamlnodes import Problems


# ---------------------------------------------------------------- loading folders


def builtin_rules_dir() -> Path:
    """The built-in rule pack: diagnose/builtin_rules in an installed wheel (pyproject maps the
    top-level rules/ there), or rules/ in a source checkout. Plain paths: importlib.resources
    costs ~25 ms of imports on every start."""
    here = Path(__file__).resolve().parent.parent  # diagnose/
    installed = here / "builtin_rules"
    return installed if installed.is_dir() else here.parent / "rules"


def rule_files(directory: Path) -> list[Path]:
    """Every .yaml/.yml file under a folder, as rglob finds them (symlinked folders not followed),
    with a stack: pathlib's rglob recurses and a folder 1,500 deep ends it in RecursionError."""
    import os

    found: list[Path] = []
    stack = [str(directory)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif Path(entry.name).suffix in (".yaml", ".yml") and entry.is_file():
                            found.append(Path(entry.path))
                    except OSError:
                        continue
        except OSError:
            continue  # a folder we may not list holds no rule we could read
    return sorted(found)


def load_rule_file(path: Path, problems: Problems, check_hang: bool = True) -> Rule | None:
    # The YAML parser is only needed when the rule cache misses (see rulecache.py).
    from diagnose.rules.parse import RuleParser
    from diagnose.rules.yamlnodes import load_yaml

    doc = load_yaml(path, problems)
    if doc is None:
        return None
    return RuleParser(doc, problems, check_hang).parse()


def load_rules(extra_dirs: Sequence[Path] = (), builtin: bool = True) -> RuleSet:
    """The built-in pack plus user folders; a user rule with a built-in id replaces it.

    Built-in rules are held to the hang checks by the test suite, so only user rules pay
    for the torture run at load time.
    """
    from diagnose.rules.yamlnodes import Problems

    problems = Problems()
    rules: dict[str, Rule] = {}
    origin: dict[str, Path] = {}
    overridden: list[tuple[str, Path, Path]] = []
    sources: list[Path] = []
    folders: list[tuple[Path, bool]] = [(builtin_rules_dir(), True)] if builtin else []
    for folder in extra_dirs:
        if not folder.exists():
            raise RuleError(f"rule folder {folder}: no such file or directory")
        folders.append((folder, False))
    for folder, is_builtin in folders:
        files = [folder] if folder.is_file() else rule_files(folder)
        sources.append(folder)
        seen_here: dict[str, Path] = {}
        for path in files:
            rule = load_rule_file(path, problems, check_hang=not is_builtin)
            if rule is None:
                continue
            if rule.id in seen_here:
                problems.add(path, 1, f"rule id '{rule.id}' is also defined in {seen_here[rule.id]}")
                continue
            seen_here[rule.id] = path
            if not is_builtin:
                rule = _replace(rule, builtin=False)
            if rule.id in rules and not is_builtin:
                overridden.append((rule.id, path, origin[rule.id]))
            rules[rule.id] = rule
            origin[rule.id] = path
    if problems:
        count = len(problems.items)
        raise RuleError(f"{count} problem{'s' if count != 1 else ''} in rule files", problems.items)
    return RuleSet(list(rules.values()), overridden, sources)


def _replace(rule: Rule, **changes: Any) -> Rule:
    from dataclasses import replace

    return replace(rule, **changes)
