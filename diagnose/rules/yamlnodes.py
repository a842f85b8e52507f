"""YAML read with line numbers, so every problem in a rule file names file:line.

Rule files may come from anyone, so reading one must stay cheap: anchors and aliases are
refused (a 734-byte "billion laughs" file expands to gigabytes when its aliases are
constructed), and so are files over MAX_BYTES and nesting deeper than MAX_DEPTH (PyYAML's
composer recurses per level)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1024 * 1024  # a rule file of the pack is ~2-14 KiB
MAX_DEPTH = 32  # a rule's when: nests all/any/none a few levels; the pack needs under 10


class UnsafeYaml(yaml.MarkedYAMLError):
    """A YAML feature rule files may not use, at its place in the file."""


class _RuleLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and deep nesting while composing nodes, before
    anything is expanded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise UnsafeYaml(problem="YAML anchors and aliases are not allowed in rule files",
                             problem_mark=event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise UnsafeYaml(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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
        self._loader = _RuleLoader(text)
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
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)  # never more: a huge file is refused unread
    except OSError as exc:
        problems.add(path, 1, f"cannot read: {exc.strerror or exc}")
        return None
    if len(raw) > MAX_BYTES:
        problems.add(path, 1, f"rule file is over {MAX_BYTES:,} bytes, the limit (one rule per file)")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.add(path, line, "not valid UTF-8")
        return None
    try:
        return YamlFile(path, text)
    except UnsafeYaml as exc:
        mark = exc.problem_mark
        problems.add(path, mark.line + 1 if mark is not None else 1, str(exc.problem))
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problems.add(path, line, f"invalid YAML: {exc.problem or exc}")
        return None
    except yaml.YAMLError as exc:
        problems.add(path, 1, f"invalid YAML: {exc}")
        return None
