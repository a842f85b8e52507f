"""JUnit XML, as GitLab, Jenkins and the GitHub test reporters render it.

<testsuites> holds one <testsuite>; in it one <testcase> for the run as a whole and one per
scanned input. A test case fails (<failure message=... type=...>) when a cause at or above
--fail-on rests on it (the run's case: any such cause), so the test view and the exit code
agree; with --fail-on never the default threshold (error) marks failures, the exit code stays 0.
Causes below the threshold are listed in <system-out>.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import IO

from diagnose.engine.findings import Cause, Diagnosis
from diagnose.evidence.lines import strip_ansi
from diagnose.report._common import at_or_above, inputs, one_line

SUITE_NAME = "diagnose"
MESSAGE_CAUSES = 3  # top causes named in a failure's message attribute
MAX_MESSAGE = 1000
# XML 1.0 forbids most control characters; logs hold them (colour codes, \x00 from a crash).
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """Text an XML 1.0 parser accepts: colour codes dropped, other forbidden characters spelled out."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group(0)):02x}", strip_ansi(text))


def _describe(causes: Sequence[Cause], source: str | None = None) -> str:
    lines: list[str] = []
    for number, cause in enumerate(causes, 1):
        lines.append(f"{number}. {cause.title} [{cause.id}] ({cause.severity}, {cause.role}, confidence {cause.confidence:.0%})")
        lines.append(f"   {cause.explanation}")
        evidence = [e for e in cause.evidence if source is None or e.source == source]
        if evidence:
            lines.append("   Evidence:")
            lines += [f"     {item.location()}: {item.text}" for item in evidence[:20]]
            if len(evidence) > 20:
                lines.append(f"     ... {len(evidence) - 20} more")
        if cause.fix:
            lines.append("   Fix:")
            lines += [f"     - {step}" for step in cause.fix]
        lines.append("")
    return "\n".join(lines)


def _message(causes: Sequence[Cause]) -> str:
    named = "; ".join(f"{c.title} [{c.id}]" for c in causes[:MESSAGE_CAUSES])
    more = f" (+{len(causes) - MESSAGE_CAUSES} more)" if len(causes) > MESSAGE_CAUSES else ""
    return one_line(named + more, MAX_MESSAGE)


def _testcase(suite: ET.Element, classname: str, name: str, failing: Sequence[Cause], passing: Sequence[Cause],
              source: str | None, file: str | None = None) -> None:
    case = ET.SubElement(suite, "testcase", {"classname": classname, "name": xml_text(name), "time": "0"})
    if file is not None:
        case.set("file", xml_text(file))
    if failing:
        failure = ET.SubElement(case, "failure", {"message": xml_text(_message(failing)), "type": failing[0].id})
        failure.text = xml_text(_describe(failing, source))
    if passing:
        out = ET.SubElement(case, "system-out")
        out.text = xml_text("Below the failure threshold:\n" + _describe(passing, source))


def to_junit(diagnosis: Diagnosis, fail_on: str = "error") -> ET.Element:
    threshold = fail_on if fail_on != "never" else "error"
    causes = diagnosis.causes
    seconds = diagnosis.stats.get("seconds", 0)
    root = ET.Element("testsuites", {"name": SUITE_NAME})
    run = diagnosis.evidence.run
    suite = ET.SubElement(root, "testsuite", {"name": f"{SUITE_NAME} {run.mode}"})
    if run.host:
        suite.set("hostname", xml_text(run.host))
    properties = ET.SubElement(suite, "properties")
    for key, value in (("run", run.id), ("mode", run.mode), ("fail-on", fail_on),
                       ("rules", str(diagnosis.stats.get("rules", ""))), ("skipped-rules", str(len(diagnosis.skipped)))):
        ET.SubElement(properties, "property", {"name": key, "value": xml_text(value)})

    failing_all = [c for c in causes if at_or_above(c.severity, threshold)]
    passing_all = [c for c in causes if c not in failing_all]
    _testcase(suite, SUITE_NAME, "run", failing_all, passing_all, None)
    run_case = suite.find("testcase")
    if run_case is not None and (diagnosis.gaps or diagnosis.evidence.notes):
        err = ET.SubElement(run_case, "system-err")
        err.text = xml_text("\n".join([f"could not check {g.source}: {g.reason}" for g in diagnosis.gaps]
                                      + [f"note: {n}" for n in diagnosis.evidence.notes]))

    for name in inputs(diagnosis):
        here = [c for c in causes if any(e.source == name for e in c.evidence)]
        _testcase(suite, f"{SUITE_NAME}.inputs", name, [c for c in here if c in failing_all],
                  [c for c in here if c not in failing_all], name, file=name)

    cases = suite.findall("testcase")
    failures = sum(1 for case in cases if case.find("failure") is not None)
    for element in (root, suite):
        element.set("tests", str(len(cases)))
        element.set("failures", str(failures))
        element.set("errors", "0")
        element.set("time", str(seconds if isinstance(seconds, (int, float)) else 0))
    suite.set("skipped", "0")
    return root


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, object] | None = None, fail_on: str = "error") -> None:
    root = to_junit(diagnosis, fail_on)
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
