"""One reading of the NVIDIA driver's Xid line: the kernel events (engine/kernel_events.py, which
tie an Xid to a run by pid and name) and the CUDA analysis (engine/analyzers/cuda.py, the Xid
table) agree on the code, pid and process name of every real Xid line the repo holds: the
fixtures' and samples' kernel logs, and the lines the Xid rules test themselves on (each from
the public report the rule's `references` name)."""

from __future__ import annotations

from pathlib import Path

import yaml

from diagnose.engine.analyzers.cuda import xid_events
from diagnose.engine.kernel_events import kernel_events
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.evidence.lines import xid_line
from tests.support.paths import FIXTURES, REPO

MARK = "NVRM: Xid ("


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def real_xid_lines() -> list[tuple[str, str]]:
    """(where, line) for every Xid line of a captured file or of a rule's own tests."""
    found: list[tuple[str, str]] = []
    for folder in (FIXTURES, REPO / "tests" / "data"):
        for path in sorted(folder.rglob("*")):
            if not path.is_file() or path.suffix in (".md", ".py"):  # prose and recipes quote, they are no output
                continue
            text = path.read_bytes().decode("utf-8", errors="replace")
            found.extend((str(path.relative_to(REPO)), line) for line in text.splitlines() if MARK in line)
    for path in sorted((REPO / "rules").rglob("*.yaml")):
        tests = (yaml.safe_load(path.read_text()) or {}).get("tests")
        found.extend((str(path.relative_to(REPO)), s) for s in _strings(tests) if MARK in s and "\n" not in s)
    return found


def _pid(value: str | None) -> int | None:
    value = (value or "").strip("'")
    return int(value) if value.isdigit() else None


def test_kernel_events_and_cuda_agree_on_every_real_xid_line(tmp_path: Path) -> None:
    lines = real_xid_lines()
    # The fixtures (2 runs), the H200 sample and the rules' own tests: a dozen shapes at least.
    assert len({line for _, line in lines}) >= 12, lines
    log = tmp_path / "kernel.log"
    log.write_text("".join(line + "\n" for _, line in lines))
    evidence = evidence_from_paths([f"dmesg:{log}"])
    by_kernel = {e.line: (int(e.detail.removeprefix("Xid ")), e.pid, e.comm) for e in kernel_events(evidence)
                 if e.kind == "xid"}
    by_cuda = {e.line_no: (e.xid, _pid(e.pid), (e.name or "").strip() or None) for e in xid_events(evidence)}
    for number, (where, line) in enumerate(lines, start=1):
        # The code, read without the pattern: the number after "): ".
        code = int(line.split(MARK, 1)[1].split("): ", 1)[1].split(",", 1)[0])
        assert by_kernel.get(number) == by_cuda.get(number), (where, line)
        assert by_cuda[number][0] == code, (where, line)
        parsed = xid_line(line)
        assert parsed is not None and parsed.xid == code
    assert len(by_kernel) == len(by_cuda) == len(lines)
    shapes = set(by_cuda.values())
    assert any(pid is not None and name is not None for _, pid, name in shapes)  # pid=680, name=python3
    assert any(pid is None and name is None for _, pid, name in shapes)  # "79, GPU has fallen off the bus."
    assert any(pid is not None and name is None for _, pid, name in shapes)  # "63, pid=1896, Row Remapper: ..."
    assert any(name == "<unknown>" for _, _, name in shapes)  # pid='<unknown>', name=<unknown>


def test_fixture_xid_fields() -> None:
    """The fixture runs' own Xid lines, field by field, as their HOW.md says the driver logged them."""
    for fixture, pid, name in (("device-assert-2gpu", 829, "python"), ("gpu-device-assert-live", 670, "python3")):
        evidence = evidence_from_paths([str(FIXTURES / fixture / "kernel" / "dmesg.txt")])
        (event,) = [e for e in kernel_events(evidence) if e.kind == "xid"]
        (xid,) = xid_events(evidence)
        assert (event.detail, event.pid, event.comm) == ("Xid 43", pid, name)
        assert (xid.xid, xid.pid, xid.name, xid.line_no) == (43, str(pid), name, event.line)
