"""manifest.json is untrusted input: every field is checked against
diagnose/schema/bundle-manifest.schema.json, a misfit is one clear line and exit 2 (or a gap,
for a fact section), never a traceback, whatever JSON is in it."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from diagnose.app import diagnose
from diagnose.cli import exit_code
from diagnose.errors import DiagnoseError
from diagnose.evidence.bundle import FORMAT, MANIFEST, evidence_from_bundle, manifest_schema
from diagnose.evidence.jsoncheck import problem
from diagnose.report.render import Format, render
from diagnose.rules.cache import load_rules_cached
from diagnose.rules.model import RuleSet
from tests.support.cli import run_cli
from tests.support.paths import FIXTURES

LOG = "logs/train.log"


def fixture_manifests() -> list[Path]:
    return sorted(FIXTURES.glob("*/manifest.json"))


def write_bundle_dir(folder: Path, manifest: object) -> Path:
    """A folder bundle with one real log (what a crashed script printed) and this manifest."""
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    crashed = next(p for p in fixture_manifests() if p.parent.name == "torchrun-rank-exception").parent
    log = next(crashed.rglob("*.log"))
    (folder / LOG).write_bytes(log.read_bytes())
    (folder / MANIFEST).write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return folder


def valid_manifest() -> dict[str, Any]:
    return {"format": FORMAT, "schema_version": 1, "run": {"id": "fuzz", "collected_at": 1.7e9},
            "files": [{"path": LOG, "kind": "log", "origin": "/runs/train.log", "rank": 0, "mtime": 1.7e9}]}


def test_schema_is_valid_json_schema_and_every_fixture_fits_it() -> None:
    schema = manifest_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    manifests = fixture_manifests()
    assert len(manifests) >= 30
    for path in manifests:
        data = json.loads(path.read_text())
        assert list(validator.iter_errors(data)) == [], path
        assert problem(data, schema, "") is None, path


def with_files(*files: dict[str, Any]) -> dict[str, Any]:
    manifest = valid_manifest()
    manifest["files"] = list(files)
    return manifest


GOOD = {"path": LOG, "kind": "log"}
TIME_RANGE = "a number or null in range 0..32503680000"


@pytest.mark.parametrize(("manifest", "says"), [
    (with_files(GOOD, GOOD, GOOD, {"path": LOG, "kind": "log", "mtime": 1e300}), f"files[3].mtime: expected {TIME_RANGE}, got 1e+300"),
    ('{"format": "diagnose-bundle", "schema_version": 1, "files": [{"path": "logs/train.log", "kind": "log", "mtime": 1e400}]}',
     f"files[0].mtime: expected {TIME_RANGE}, got an infinite number"),
    (with_files({"path": LOG, "kind": "log", "mtime": "yesterday"}), f"files[0].mtime: expected {TIME_RANGE}, got a string"),
    (with_files({"path": LOG, "kind": "exe"}), "files[0].kind: expected one of 'log', 'dmesg', 'nvidia-smi', 'nvml', "
                                              "'packages', 'elastic-error', 'k8s-pod', 'sacct', 'trainer-state', 'lightning-metrics', "
                                              "'lightning-hparams', 'wandb-summary', 'nccl-trace', 'slurm'"),
    (with_files({"path": LOG, "kind": "log", "rank": True}), "files[0].rank: expected a whole number or null in range "
                                                             "0..1048576, got a boolean"),
    (with_files({"kind": "log"}), "files[0].path: missing (required)"),
    (with_files({"path": "../../../etc/passwd", "kind": "log"}), "files[0].path: '../../../etc/passwd' points outside the bundle"),
    (with_files({"path": "logs/none.log", "kind": "log"}), "files[0].path: lists 'logs/none.log' but the bundle has no such file"),
    (with_files({"path": "logs", "kind": "log"}), "files[0].path: lists 'logs' but the bundle has no such file"),
    ({**valid_manifest(), "files": {"path": LOG}}, "files: expected an array or null, got an object"),
    ({**valid_manifest(), "run": {"id": 7}}, "run.id: expected a string or null, got a number"),
    ({**valid_manifest(), "run": {"boot_time": -5}}, f"run.boot_time: expected {TIME_RANGE}, got -5"),
    ({**valid_manifest(), "run": ["flex7"]}, "run: expected an object or null, got an array"),
    ({**valid_manifest(), "gaps": [{"source": 1}]}, "gaps[0].source: expected a string, got a number"),
    ({**valid_manifest(), "schema_version": True}, "schema_version True is not supported (expected 1)"),
    ({**valid_manifest(), "format": "tarball"}, "not a diagnose bundle manifest (format should be 'diagnose-bundle')"),
    ([1, 2], "not a diagnose bundle manifest (format should be 'diagnose-bundle')"),
    ('{"format": "diagnose-bundle", "schema_version": 1, "run": {"collected_at": NaN}}',
     "not readable JSON (NaN is not a number JSON allows)"),
    ('{"format": "diagnose-bundle", "schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "not readable JSON (nested too deeply)"),
    ('{"format": "diagnose-bundle", "schema_version": 1, "run": {"collected_at": ' + "9" * 5000 + "}}",
     "not readable JSON (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; "
     "use sys.set_int_max_str_digits() to increase the limit)"),
])
def test_a_bad_field_is_one_line_and_exit_2(tmp_path: Path, manifest: object, says: str) -> None:
    bundle = write_bundle_dir(tmp_path / "b", manifest)
    result = run_cli([str(bundle), "--format", "json"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    assert result.stderr.splitlines() == [f"diagnose: error: bundle {bundle}: manifest.json: {says}"]
    assert result.stdout == ""


@pytest.mark.parametrize(("section", "value", "says"), [
    ("tmux", {"socket": "/tmp/tmux-0/default", "list_sessions": {"rc": "zero"}},
     "tmux.list_sessions.rc: expected a whole number or null in range -2147483648..2147483647, got a string"),
    ("checkpoints", {"directory": "/ckpt", "exists": True, "collected_at": 1e300},
     "checkpoints.collected_at: expected a number in range 0..32503680000, got 1e+300"),
    ("checkpoints", {"directory": "/ckpt", "exists": True}, "checkpoints.collected_at: missing (required)"),
    ("exits", [{"source": "process", "signal": -1}], "exits[0].signal: expected a whole number or null in range 0..1024, got -1"),
    ("process", {"source": "ps", "alive": True, "pids": ["1"]},
     "process.pids[0]: expected a whole number in range 0..4194304, got a string"),
    ("expected_files", 5, "expected_files: expected an array or null, got a number"),
    ("collectors", {"logs": {"status": "ok", "duration_s": "slow"}},
     "collectors.logs.duration_s: expected a number in range 0..31536000, got a string"),
])
def test_a_bad_fact_section_becomes_a_gap(tmp_path: Path, section: str, value: object, says: str) -> None:
    """The logs still count: one broken fact section is left out and said so, not the bundle."""
    bundle = write_bundle_dir(tmp_path / "b", {**valid_manifest(), section: value})
    result = run_cli([str(bundle), "--format", "json"], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert {"source": section, "reason": f"manifest.json: {says}; left out"} in report["gaps"]
    assert report["causes"], "the log's crash is still diagnosed"


# ------------------------------------------------------------------ fuzzing


def schema_keys(schema: Any) -> set[str]:
    """Every property name the schema knows, so random objects often hit real fields."""
    found: set[str] = set()
    if isinstance(schema, dict):
        found |= set(schema.get("properties", {}))
        for value in schema.values():
            found |= schema_keys(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= schema_keys(value)
    return found


KEYS = sorted(schema_keys(manifest_schema()) - {"$defs"})
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -1, 1e300, -1e300, 2**31, 2**63, 1.5, "", "log", "dmesg", "ok", "gap", LOG, "../x", "/etc/passwd",
                     "a\x00b", "logs", "flex7", "x" * 5000, "15", "1\t%0:0.0\t1\t137\tpython\t9\t42"]),
    st.text(max_size=12),
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), inner, max_size=5),
), max_leaves=24)


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*prefix, index))


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(document))
    holder = copy
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return copy


def real_base(path: Path) -> dict[str, Any]:
    """A fixture's manifest (tmux, checkpoints, exits... as collected) listing our one log."""
    data: dict[str, Any] = json.loads(path.read_text())
    data["files"] = valid_manifest()["files"]
    return data


BASES = [valid_manifest()] + [real_base(p) for p in fixture_manifests()
                              if p.parent.name in ("seed-flex7-tmux-died", "ckpt-disk-full", "torchrun-rank-exception")]


@st.composite
def manifests(draw: st.DrawFn) -> Any:
    """Mostly a real manifest with a few fields replaced by random JSON; sometimes a manifest of
    random sections; sometimes any JSON at all."""
    shape = draw(st.sampled_from(["mutated", "mutated", "mutated", "sections", "anything"]))
    if shape == "anything":
        return draw(VALUES)
    if shape == "sections":
        sections = draw(st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6))
        return {"format": FORMAT, "schema_version": 1, **sections}
    document = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        where = draw(st.sampled_from([p for p in paths_of(document) if p[:1] not in ((), ("format",), ("schema_version",))]))
        document = replaced(document, where, draw(VALUES))
    return document


@pytest.fixture(scope="module")
def ruleset() -> RuleSet:
    return load_rules_cached([])


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=manifests())
def test_any_json_as_manifest_ends_in_0_1_or_2_never_a_crash(tmp_path_factory: pytest.TempPathFactory, ruleset: RuleSet,
                                                            document: Any) -> None:
    """In process, as `diagnose BUNDLE` runs: read, diagnose, render. DiagnoseError is exit 2;
    anything else escaping is what the CLI would print as 'internal error', and fails here with
    its traceback. Whatever our checker lets through, jsonschema accepts too."""
    folder = tmp_path_factory.mktemp("fuzz")
    bundle = write_bundle_dir(folder, document)
    try:
        evidence = evidence_from_bundle(bundle)
    except DiagnoseError as exc:
        assert "\n" not in exc.message and exc.message.startswith(f"bundle {bundle}: manifest.json: "), exc.message
        code = 2
    else:
        validator = jsonschema.Draft202012Validator(manifest_schema())
        assert isinstance(document, dict)
        checked = {k: v for k, v in document.items() if not any(g.source == k and "left out" in g.reason for g in evidence.gaps)}
        assert list(validator.iter_errors(checked)) == []
        diagnosis = diagnose(evidence, ruleset)
        for fmt in (Format.JSON, Format.TERMINAL, Format.MARKDOWN):
            out = io.StringIO()
            render(fmt, diagnosis, out, True, rules=ruleset.by_id(), fail_on="error")
            assert out.getvalue()
        code = exit_code(diagnosis, "error")
    event(f"exit {code}")  # --hypothesis-show-statistics: how many got past the checks
    assert code in (0, 1, 2)


def test_the_checker_rejects_what_it_should() -> None:
    """A few direct cases of the subset the schema relies on (the fuzz test covers the rest)."""
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": ["integer", "null"], "minimum": 0,
                                                                           "maximum": 3}}}
    assert problem({"a": 2}, schema, "x") is None and problem({"a": None}, schema, "x") is None
    assert problem({"a": 2.0}, schema, "x") == "x.a: expected a whole number or null in range 0..3, got a number"
    assert problem({"a": 4}, schema, "x") == "x.a: expected a whole number or null in range 0..3, got 4"
    assert problem({"a": True}, schema, "x") == "x.a: expected a whole number or null in range 0..3, got a boolean"
    assert problem({}, schema, "x") == "x.a: missing (required)"
    assert problem({"a": math.inf}, {"type": "object", "properties": {"a": {"type": "number"}}}, "x") == \
        "x.a: expected a number, got an infinite number"
