"""The JSON Schema of a rule file (diagnose/schema/rule.schema.json), built from the rule
language's own tables (fields, condition kinds and their fields, analyzers, vocabularies), so
editors with the YAML language server complete and check rule files as diagnose reads them.

`diagnose rules schema` prints it; a test holds the file in the package equal to it and every
built-in rule valid against it. The loader stays the judge: the schema cannot check regexes,
placeholders or the file name, and says so in its description.
"""

from __future__ import annotations

from typing import Any

from diagnose import HOMEPAGE
from diagnose.rules import predicates as p
from diagnose.rules.conditions import FACT_KINDS, FieldSpec
from diagnose.rules.extensions import ANALYZER_CAPTURES
from diagnose.rules.model import ID_SHAPE, OPS, TEXT_KINDS
from diagnose.rules.testcase import CASE_KEYS as TEST_CASE_KEYS
from diagnose.vocab import RELAUNCHES, ROLES, SEVERITIES

SCHEMA_ID = f"{HOMEPAGE}/raw/main/diagnose/schema/rule.schema.json"
TEXT = {"type": "string", "minLength": 1, "pattern": r"\S"}
TEXTS = {"oneOf": [TEXT, {"type": "array", "items": TEXT}]}
LINES = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}  # a test's log lines, blank ones too


def _field_schema(spec: FieldSpec) -> dict[str, Any]:
    """What YAML value a condition field takes, by the predicate that parses it."""
    parse = spec.parse
    if parse is p.boolean:
        schema: dict[str, Any] = {"type": "boolean"}
    elif parse is p.number:
        # 3, [1, 2] (any of), or a comparison such as ">= 5"
        schema = {"oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}, "minItems": 1},
                            {"type": "string", "pattern": r"^\s*(?:[<>]=?|==|!=)?\s*-?\d+(?:\.\d+)?\s*$"}]}
    elif parse is p.version_spec:
        schema = {"type": ["string", "number"]}
    elif parse is p.signal_number:
        one = {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 127}, {"type": "string", "minLength": 1}]}
        schema = {"oneOf": [one, {"type": "array", "items": one, "minItems": 1}]}
    elif parse in (p.text, p.contains):
        schema = dict(TEXTS)
    else:  # p.choice(...): the options are in the closure
        options = _choice_options(spec)
        schema = {"oneOf": [{"enum": options}, {"type": "array", "items": {"enum": options}, "minItems": 1}]} if options else {}
    schema["description"] = spec.doc
    return schema


def _choice_options(spec: FieldSpec) -> list[str]:
    closure = getattr(spec.parse, "__closure__", None) or ()
    for cell in closure:
        value = cell.cell_contents
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
    return []


def rule_schema() -> dict[str, Any]:
    condition_ref = {"$ref": "#/$defs/condition"}
    condition_list = {"type": "array", "items": condition_ref, "minItems": 1}
    kinds: dict[str, Any] = {}
    for op in OPS:
        kinds[op] = {**condition_list, "description": {
            "all": "every condition holds", "any": "at least one holds", "none": "none holds",
            "maybe": "adds captures and evidence when it holds; never decides (only under all or when)"}[op]}
    for name in TEXT_KINDS:
        kinds[name] = {"type": "string", "minLength": 1,
                       "description": f"a regex matched against each {name} line; named groups become captures"}
    for name, kind in FACT_KINDS.items():
        kinds[name] = {
            "type": "object", "description": kind.doc, "minProperties": 1, "additionalProperties": False,
            "properties": {field: _field_schema(spec) for field, spec in kind.fields.items()},
            "required": sorted(kind.required),
        }
    condition = {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                 "properties": kinds}
    case_properties: dict[str, Any] = {key: {} for key in TEST_CASE_KEYS}
    case_properties.update({
        "log": LINES, "dmesg": LINES, "slurm": LINES, "note": TEXT,
        "packages": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        "captures": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
    })
    case = {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": case_properties}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "diagnose rule file",
        "description": ("One failure signature for diagnose (one rule per file, named <id>.yaml). diagnose's loader "
                        "also checks what a schema cannot: regexes compile and cannot backtrack catastrophically, "
                        "placeholders name captures, the file name is the id. docs/rules.md describes the format."),
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "title", "category", "role", "severity", "confidence", "when", "explanation", "fix"],
        "properties": {
            "id": {"type": "string", "pattern": ID_SHAPE.pattern, "description": "<category>.<name>, lowercase"},
            "title": {**TEXT, "description": "one line; may name captures as {name}"},
            "category": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]*$", "description": "the first part of the id"},
            "role": {"enum": [r.value for r in ROLES], "description": "root: a cause; symptom: follows from one; context: neither"},
            "severity": {"enum": [s.value for s in SEVERITIES]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "when": _when(kinds),
            "explanation": {**TEXT, "description": "what happened and why; may name captures as {name}"},
            "fix": {"oneOf": [TEXT, {"type": "array", "items": TEXT, "minItems": 1}], "description": "the steps that fix it"},
            # YAML 1.1 readers (PyYAML) read a bare no/yes as false/true; the loader takes the word
            "relaunch": {"enum": [*(r.value for r in RELAUNCHES), True, False], "description": "can a plain relaunch help? (quote \"no\")"},
            "references": {"oneOf": [{"type": "string", "pattern": r"^https?://\S+$"},
                                     {"type": "array", "items": {"type": "string", "pattern": r"^https?://\S+$"}}]},
            "tags": TEXTS,
            "analyze": {"enum": sorted(ANALYZER_CAPTURES), "description": "reasoning a regex cannot do"},
            "tests": {"type": "object", "additionalProperties": False, "properties": {
                "match": {"type": "array", "items": case}, "no_match": {"type": "array", "items": case}}},
        },
        "$defs": {"condition": condition},
    }


def _when(kinds: dict[str, Any]) -> dict[str, Any]:
    """`when:` is a mapping of conditions whose keys AND together (all/any/none lists or one condition)."""
    return {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": kinds}
