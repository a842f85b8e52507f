"""Parse one rule file (YAML nodes with line numbers) into a Rule, recording every problem
with file:line. Only imported when the rule cache misses."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import TypeVar

import yaml

from diagnose.evidence.model import TextKind
from diagnose.patterns.hangcheck import MAX_PATTERNS_PER_RULE, check_pattern
from diagnose.rules import predicates
from diagnose.rules.conditions import FACT_KINDS, FactCondition
from diagnose.rules.extensions import ANALYZER_CAPTURES
from diagnose.rules.model import (
    ID_SHAPE,
    OPS,
    OPTIONAL_KEYS,
    REMOVED_KEYS,
    REQUIRED_KEYS,
    TEXT_KINDS,
    Condition,
    Group,
    Rule,
    RuleTest,
    TextCondition,
)
from diagnose.rules.testcase import CASE_KEYS, OLD_KEYS
from diagnose.rules.yamlnodes import Problems, YamlFile
from diagnose.vocab import RELAUNCHES, ROLES, SEVERITIES

W = TypeVar("W", bound=str)


class RuleParser:
    def __init__(self, doc: YamlFile, problems: Problems, check_hang: bool) -> None:
        self.doc = doc
        self.path = doc.path
        self.problems = problems
        self.check_hang = check_hang
        self.ok = True
        self.patterns = 0

    def error(self, line: int, message: str) -> None:
        self.ok = False
        self.problems.add(self.path, line, message)

    def parse(self) -> Rule | None:
        doc = self.doc
        root = doc.root
        if root is None:
            self.error(1, "empty rule file")
            return None
        if not isinstance(root, yaml.MappingNode):
            self.error(doc.line(root), "a rule file must be a mapping of fields (id, title, when, ...)")
            return None
        for line, key in doc.duplicate_keys():
            self.error(line, f"duplicate key '{key}'")
        fields: dict[str, tuple[yaml.Node, int]] = {}
        for key, node, line in doc.items(root):
            if key in REMOVED_KEYS:
                self.error(line, REMOVED_KEYS[key])
                continue
            if key not in REQUIRED_KEYS and key not in OPTIONAL_KEYS:
                self.error(line, f"unknown field '{key}' (known: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
                continue
            fields.setdefault(key, (node, line))
        for key in REQUIRED_KEYS:
            if key not in fields:
                self.error(doc.line(root), f"missing required field '{key}'")
        if not self.ok and any(k not in fields for k in REQUIRED_KEYS):
            return None

        rule_id = self.string(fields["id"])
        if rule_id is not None:
            if not ID_SHAPE.match(rule_id):
                self.error(fields["id"][1], f"id '{rule_id}' must be dotted lowercase: <category>.<name>")
            if self.path.stem != rule_id:
                self.error(fields["id"][1], f"id '{rule_id}' must match the file name ({self.path.name})")
        title = self.string(fields["title"])
        category = self.string(fields["category"])
        if rule_id and category and not rule_id.startswith(category + "."):
            self.error(fields["category"][1], f"category '{category}' must be the first part of the id '{rule_id}'")
        role = self.choice(fields["role"], ROLES)
        severity = self.choice(fields["severity"], SEVERITIES)
        confidence = self.confidence(fields["confidence"])
        when = self.when(fields["when"])
        explanation = self.template(fields["explanation"])
        fix = self.string_list(fields["fix"], "fix", required=True)
        for item in fix or ():
            self.check_template(item, fields["fix"][1])
        references = self.string_list(fields["references"], "references") if "references" in fields else ()
        for ref in references or ():
            if not re.match(r"^https?://\S+$", ref):
                self.error(fields["references"][1], f"reference must be a URL: {ref!r}")
        relaunch = self.choice(fields["relaunch"], RELAUNCHES) if "relaunch" in fields else None
        analyze = self.analyzer(fields["analyze"]) if "analyze" in fields else None
        tests = self.tests(fields["tests"]) if "tests" in fields else ()
        if not self.ok or None in (rule_id, title, category, role, severity, confidence, when, explanation, fix):
            return None
        assert rule_id and title and category and role and severity and when and explanation is not None
        return Rule(
            id=rule_id, title=title, category=category, role=role, severity=severity,
            confidence=float(confidence or 0.0), when=when, explanation=explanation, fix=tuple(fix or ()),
            references=tuple(references or ()), relaunch=relaunch, tests=tuple(tests or ()),
            analyze=analyze, path=self.path,
        )

    # -- scalar fields

    def string(self, entry: tuple[yaml.Node, int]) -> str | None:
        node, line = entry
        value = self.doc.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or not value.strip():
            self.error(line, "expected a non-empty text value")
            return None
        return value.strip()

    def choice(self, entry: tuple[yaml.Node, int], options: Sequence[W]) -> W | None:
        node, line = entry
        # A choice is a word: take the scalar's own text, so a bare `relaunch: no` is "no"
        # and not YAML 1.1's false.
        if not isinstance(node, yaml.ScalarNode) or not node.value.strip():
            self.error(line, f"expected one of: {', '.join(options)}")
            return None
        for option in options:
            if node.value.strip() == option:
                return option
        self.error(line, f"'{node.value}' is not one of: {', '.join(options)}")
        return None

    def confidence(self, entry: tuple[yaml.Node, int]) -> float | None:
        node, line = entry
        value = self.doc.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            self.error(line, "confidence must be a number from 0 to 1")
            return None
        return float(value)

    def string_list(self, entry: tuple[yaml.Node, int], name: str, required: bool = False) -> tuple[str, ...] | None:
        node, line = entry
        value = self.doc.value(node)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.error(line, f"{name} must be a list of texts")
            return None
        if required and not value:
            self.error(line, f"{name} must not be empty")
            return None
        return tuple(v.strip() for v in value)

    def template(self, entry: tuple[yaml.Node, int]) -> str | None:
        value = self.string(entry)
        if value is not None:
            self.check_template(value, entry[1])
        return value

    def check_template(self, text: str, line: int) -> None:
        try:
            for _literal, name, spec, _conv in string.Formatter().parse(text):
                if name is not None and (not name.isidentifier() or spec):
                    self.error(line, f"placeholder {{{name}}} must be a plain capture name")
        except ValueError as exc:
            self.error(line, f"bad placeholder braces ({exc}); write {{{{ and }}}} for literal braces")

    def analyzer(self, entry: tuple[yaml.Node, int]) -> str | None:
        value = self.string(entry)
        if value is not None and value not in ANALYZER_CAPTURES:
            self.error(entry[1], f"unknown analyzer '{value}' (known: {', '.join(sorted(ANALYZER_CAPTURES))})")
            return None
        return value

    # -- conditions

    def when(self, entry: tuple[yaml.Node, int]) -> Group | None:
        node, line = entry
        if not isinstance(node, yaml.MappingNode) or not node.value:
            self.error(line, "when must be a mapping of all/any/none lists or one condition")
            return None
        children = [self.condition_entry(key, child, key_line) for key, child, key_line in self.doc.items(node)]
        if any(c is None for c in children):
            return None
        kids = tuple(c for c in children if c is not None)
        if len(kids) == 1 and isinstance(kids[0], Group) and kids[0].op == "all":
            group = kids[0]
        else:
            group = Group("all", kids, line)
        self.check_maybe(group)
        return group

    def check_maybe(self, group: Group) -> None:
        """`maybe` only adds captures/evidence, so it belongs where it cannot change the answer:
        directly under `when` or an `all`."""
        for child in group.children:
            if isinstance(child, Group):
                if child.op == "maybe" and group.op != "all":
                    self.error(child.line, f"'maybe' can only appear under 'all' (or directly under 'when'), not under '{group.op}'")
                self.check_maybe(child)

    def condition(self, node: yaml.Node) -> Condition | None:
        line = self.doc.line(node)
        if not isinstance(node, yaml.MappingNode) or len(node.value) != 1:
            self.error(line, "each condition is a mapping with one key: all, any, none, "
                       + ", ".join(list(TEXT_KINDS) + list(FACT_KINDS)))
            return None
        key, child, key_line = self.doc.items(node)[0]
        return self.condition_entry(key, child, key_line)

    def condition_entry(self, key: str, node: yaml.Node, line: int) -> Condition | None:
        if key in OPS:
            if not isinstance(node, yaml.SequenceNode) or not node.value:
                self.error(line, f"'{key}' needs a non-empty list of conditions")
                return None
            children = [self.condition(child) for child in node.value]
            if any(c is None for c in children):
                return None
            return Group(key, tuple(c for c in children if c is not None), line)
        if key in TEXT_KINDS:
            return self.text_condition(TEXT_KINDS[key], node, line)
        if key in FACT_KINDS:
            return self.fact_condition(key, node, line)
        self.error(line, f"unknown condition kind '{key}' (known: {', '.join(list(OPS) + list(TEXT_KINDS) + list(FACT_KINDS))})")
        return None

    def text_condition(self, kind: TextKind, node: yaml.Node, line: int) -> TextCondition | None:
        value = self.doc.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(value, str) or not value:
            self.error(line, f"{kind.value} condition needs a regex string")
            return None
        self.patterns += 1
        if self.patterns == MAX_PATTERNS_PER_RULE + 1:  # said once, at the first one too many
            self.error(line, f"a rule may have at most {MAX_PATTERNS_PER_RULE} log/dmesg patterns")
        if self.patterns > MAX_PATTERNS_PER_RULE:
            return None
        problem = check_pattern(value, self.check_hang)
        if problem:
            self.error(line, problem)
            return None
        return TextCondition(kind, value, line)

    def fact_condition(self, kind: str, node: yaml.Node, line: int) -> FactCondition | None:
        spec = FACT_KINDS[kind]
        if not isinstance(node, yaml.MappingNode) or not node.value:
            self.error(line, f"{kind} condition needs a mapping of fields ({', '.join(spec.fields)})")
            return None
        tests: dict[str, predicates.Predicate] = {}
        ok = True
        for name, child, field_line in self.doc.items(node):
            field_spec = spec.fields.get(name)
            if field_spec is None:
                self.error(field_line, f"unknown {kind} field '{name}' (known: {', '.join(spec.fields)})")
                ok = False
                continue
            try:
                tests[name] = field_spec.parse(self.doc.value(child))
            except predicates.PredicateError as exc:
                self.error(field_line, f"{kind}.{name}: {exc}")
                ok = False
        for name in spec.required - set(tests):
            self.error(line, f"{kind} condition needs the field '{name}'")
            ok = False
        return FactCondition(kind, tests, line) if ok else None

    # -- tests

    def tests(self, entry: tuple[yaml.Node, int]) -> tuple[RuleTest, ...] | None:
        node, line = entry
        if not isinstance(node, yaml.MappingNode):
            self.error(line, "tests must be a mapping with match and/or no_match lists")
            return None
        out: list[RuleTest] = []
        for key, child, key_line in self.doc.items(node):
            if key not in ("match", "no_match"):
                self.error(key_line, f"unknown tests key '{key}' (known: match, no_match)")
                continue
            if not isinstance(child, yaml.SequenceNode):
                self.error(key_line, f"tests.{key} must be a list of cases")
                continue
            for case_node in child.value:
                case_line = self.doc.line(case_node)
                case = self.doc.value(case_node)
                if not isinstance(case, dict) or not case:
                    self.error(case_line, "a test case is a mapping like {log: \"a line\"}")
                    continue
                unknown = [k for k in case if k not in CASE_KEYS and k not in OLD_KEYS]
                if unknown:
                    self.error(case_line, f"unknown test case key(s) {', '.join(map(str, unknown))} (known: {', '.join(CASE_KEYS)})")
                    continue
                both = [old for old, new in OLD_KEYS.items() if old in case and new in case]
                if both:
                    self.error(case_line, f"test case gives both {both[0]} and {OLD_KEYS[both[0]]}; write {OLD_KEYS[both[0]]} only")
                    continue
                out.append(RuleTest(key == "match", case, case_line))
        return tuple(out)
