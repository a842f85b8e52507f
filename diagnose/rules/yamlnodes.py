"""YAML read with line numbers, so every problem in a rule or config file names file:line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Problems:
    """Problems found in one or more files, each as 'file:line: message'."""

    items: list[str] = field(default_factory=list)

    def add(self, path: Path | str, line: int, message: str) -> None:
        self.items.append(f"{path}:{line}: {message}")

    def __bool__(self) -> bool:
        return bool(self.items)


class YamlFile:
    """One parsed YAML document: nodes keep their line, `value()` turns a node into Python."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self._loader = yaml.SafeLoader(text)
        try:
            self.root: yaml.Node | None = self._loader.get_single_node()
        finally:
            self._loader.dispose()

    @staticmethod
    def line(node: yaml.Node) -> int:
        return int(node.start_mark.line) + 1

    def value(self, node: yaml.Node) -> Any:
        return self._loader.construct_object(node, deep=True)

    def duplicate_keys(self) -> Iterator[tuple[int, str]]:
        """(line, key) for every key repeated inside one mapping, anywhere in the document."""
        stack = [self.root] if self.root is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                seen: set[str] = set()
                for key, child in node.value:
                    name = str(key.value)
                    if name in seen:
                        yield self.line(key), name
                    seen.add(name)
                    stack.append(child)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)

    @staticmethod
    def items(node: yaml.MappingNode) -> list[tuple[str, yaml.Node, int]]:
        return [(str(k.value), v, int(k.start_mark.line) + 1) for k, v in node.value]


def load_yaml(path: Path, problems: Problems) -> YamlFile | None:
    """Parse a YAML file; on failure record one problem with its line and return None."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        problems.add(path, 1, f"cannot read: {exc.strerror or exc}")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.add(path, line, "not valid UTF-8")
        return None
    try:
        return YamlFile(path, text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problems.add(path, line, f"invalid YAML: {exc.problem or exc}")
        return None
    except yaml.YAMLError as exc:
        problems.add(path, 1, f"invalid YAML: {exc}")
        return None
