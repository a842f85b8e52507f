"""SARIF 2.1.0, as GitHub code scanning accepts it (github/codeql-action/upload-sarif).

One run; tool.driver.rules describes every loaded rule and every cause the engine makes with no
rule file (engine/causes.py), each with a helpUri to its page under docs/rules/; one result per cause, its evidence
lines as locations.

Fingerprints. GitHub keys an alert on partialFingerprints.primaryLocationLineHash and, when it
is missing, computes it from the raw text of the primary line, times and pids included, so the
same failure would open a new alert on every run. Both fingerprints written here hash the rule
id and evidence text with what differs between runs taken out (clock and boot times, pids,
addresses, hex ids, uuids, temp paths, counters): primaryLocationLineHash from the primary line,
diagnoseCause/v1 from every evidence line of the cause.

Locations are relative URIs: a file under the working directory (the checkout in CI) relative to
%SRCROOT%; a file elsewhere relative to SCANROOT, the folder holding the scanned files outside
it; a file read from a bundle by its path inside the bundle (BUNDLE, BUNDLE2, ...), the path it
had on the run's host kept as the location's property hostPath. automationDetails.id tells one
job's analysis from another's (--sarif-category, else the workflow, job and matrix of GitHub
Actions), so matrix jobs do not close each other's alerts.

GitHub shows a result only where it has a file location, so a cause resting on facts alone
(tmux state, a log that was never written) is pinned to line 1 of the first scanned file, with a
location message saying that the evidence is those facts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

from diagnose import HOMEPAGE, __version__
from diagnose.engine.causes import ENGINE_CAUSES, EngineCause
from diagnose.engine.findings import Cause, Diagnosis
from diagnose.evidence.lines import strip_ansi
from diagnose.evidence.model import EvidenceItem, TextFile
from diagnose.report._common import inputs, is_file_evidence, one_line, relative_path, scan_root
from diagnose.report.markdown import escape_inline
from diagnose.vocab import Severity

if TYPE_CHECKING:
    from diagnose.rules.model import Rule

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION = "2.1.0"
LEVEL: dict[str, str] = {Severity.CRITICAL: "error", Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
FINGERPRINT_KEY = "diagnoseCause/v1"
LINE_HASH_KEY = "primaryLocationLineHash"  # the key GitHub code scanning tracks alerts by
SRCROOT = "%SRCROOT%"
SCANROOT = "SCANROOT"
BUNDLE = "BUNDLE"
RULE_DOCS = f"{HOMEPAGE}/blob/main/docs/rules"  # `diagnose rules docs docs/rules` writes these pages
MAX_LOCATIONS = 10  # GitHub keeps at most 10 locations per result; the rest go to relatedLocations
MAX_RELATED = 100

# What changes between two runs of the same failure: clock times, boot-relative times, pids,
# addresses, counters. Replaced before hashing.
_VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    # Temp paths (tempfile.mkdtemp, pytest, torchelastic's /tmp/torchelastic_xxx): the folders are
    # random, the file name is what tells the failure.
    (re.compile(r"(?:/private)?(?:/tmp|/var/tmp|/dev/shm|/var/folders)/(?:[^\s'\"/:,;()\[\]]{1,255}/){0,64}"), "<tmp>/"),
    (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp<rand>"),  # tempfile's names: tmp + 8 random characters
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    # a leading [time]: dmesg's [  419.229755], dmesg -T's [Mon Nov 30 04:36:33 2026]. The
    # lookahead bounds it to a short bracket: unbounded, `[` and a long digit run backtracked
    # through every split of the digits (a 360 KB line took 47 s).
    (re.compile(r"^\s*\[(?=[^\]]{0,80}\])[^\]]*?(?:\d+\.\d+|\d{1,2}:\d{2}:\d{2})[^\]]*\]\s*"), ""),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "0x#"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "#"),  # hashes, uuid parts
    # run ids (wandb's 8 characters, job ids mixing letters and digits)
    (re.compile(r"\b(?=[a-z0-9]*\d)(?=[a-z0-9]*[a-z])[a-z0-9]{8,}\b"), "<id>"),
    (re.compile(r"\d+"), "#"),
    (re.compile(r"\s+"), " "),
)


def normalise(text: str) -> str:
    """Evidence text without what differs between runs of the same failure."""
    text = strip_ansi(text)
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text.strip()


def fingerprint(cause: Cause) -> str:
    """Stable across runs: the rule id and the set of normalised evidence texts; never line
    numbers, file order or times."""
    texts = sorted({normalise(item.text) for item in cause.evidence if item.text.strip()})
    if not texts:
        texts = [normalise(cause.title)]
    digest = hashlib.sha256("\n".join([cause.id, *texts]).encode("utf-8")).hexdigest()
    return digest[:32]


def line_hash(cause: Cause, item: EvidenceItem | None) -> str:
    """primaryLocationLineHash: the rule id and the primary line's normalised text (the title for
    a cause without a line), in the shape GitHub writes its own (16 hex digits, ':', the
    occurrence)."""
    text = normalise(item.text) if item is not None and item.text.strip() else normalise(cause.title)
    return hashlib.sha256(f"{cause.id}\n{text}".encode()).hexdigest()[:16] + ":1"


def rule_name(rule_id: str) -> str:
    """memory.host-oom-kill -> MemoryHostOomKill (SARIF's readable rule name)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[._-]+", rule_id) if part)


def template_text(template: str) -> str:
    """A rule's text with its capture placeholders shown as <name> ({comm} -> <comm>)."""
    try:
        parts = string.Formatter().parse(template)
        return "".join(literal + (f"<{name}>" if name is not None else "") for literal, name, _spec, _conv in parts)
    except ValueError:
        return template


def _help(fix: tuple[str, ...], references: tuple[str, ...], explanation: str) -> dict[str, str]:
    text = [explanation, "", "Fix:"] + [f"- {step}" for step in fix]
    markdown = [escape_inline(explanation), "", "**Fix**", ""] + [f"- {escape_inline(step)}" for step in fix]
    if references:
        text += ["", "References:"] + [f"- {ref}" for ref in references]
        markdown += ["", "**References**", ""] + [f"- <{ref}>" for ref in references]
    return {"text": "\n".join(text), "markdown": "\n".join(markdown)}


def rule_doc_uri(rule_id: str) -> str:
    """The rule's own page (docs/rules/<id>.md, written by `diagnose rules docs`)."""
    return f"{RULE_DOCS}/{quote(rule_id)}.md"


def _descriptor(rule_id: str, title: str, category: str, role: str, severity: str, confidence: float,
                explanation: str, fix: tuple[str, ...], references: tuple[str, ...],
                documented: bool = True) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "id": rule_id,
        "name": rule_name(rule_id),
        "shortDescription": {"text": title},
        "fullDescription": {"text": explanation},
        "help": _help(fix, references, explanation),
        "defaultConfiguration": {"level": LEVEL.get(severity, "warning")},
        "properties": {
            "tags": list(dict.fromkeys(["ml-training", category, role])),
            "precision": _precision(confidence),
            "severity": severity,
            "role": role,
            "confidence": confidence,
        },
    }
    # Built-in rules have their page in the project; a user's rule points to its first reference.
    if documented:
        descriptor["helpUri"] = rule_doc_uri(rule_id)
    elif references:
        descriptor["helpUri"] = references[0]
    return descriptor


def _precision(confidence: float) -> str:
    if confidence >= 0.85:
        return "very-high"
    if confidence >= 0.7:
        return "high"
    if confidence >= 0.5:
        return "medium"
    return "low"


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    return _descriptor(rule.id, template_text(rule.title), rule.category, rule.role, rule.severity, rule.confidence,
                       template_text(rule.explanation), tuple(template_text(f) for f in rule.fix), rule.references,
                       documented=rule.builtin)


def engine_descriptor(cause: EngineCause) -> dict[str, Any]:
    """A cause the engine makes with no rule file (engine/causes.py), described from its entry."""
    return _descriptor(cause.id, cause.title, cause.category, cause.role, cause.severity, cause.confidence,
                       cause.explanation, cause.fix, ())


def cause_descriptor(cause: Cause) -> dict[str, Any]:
    """For a cause whose rule was not handed over: described from the cause itself."""
    return _descriptor(cause.id, cause.title, cause.category, cause.role, cause.severity, cause.confidence,
                       cause.explanation, cause.fix, cause.references, documented=False)


class Locator:
    """Artifact locations GitHub and SARIF viewers can open: relative URIs with a uriBaseId each,
    the bases described in originalUriBaseIds."""

    def __init__(self, texts: tuple[TextFile, ...], root: Path) -> None:
        self.root = root
        self.texts = {t.display: t for t in texts}
        self.bases: dict[str, dict[str, str]] = {SRCROOT: {"uri": _dir_uri(root)}}
        self.bundles: dict[str, str] = {}
        for text in texts:
            if text.bundle is not None and text.member is not None and text.bundle not in self.bundles:
                name = BUNDLE if not self.bundles else f"{BUNDLE}{len(self.bundles) + 1}"
                self.bundles[text.bundle] = name
                self.bases[name] = self._base_of(Path(text.bundle))
        outside = [p for p in (self._absolute(t.display) for t in texts if t.member is None) if p is not None]
        self.scan_root: Path | None = None
        if outside:
            common = Path(os.path.commonpath([str(p.parent) for p in outside]))
            self.scan_root = common
            self.bases[SCANROOT] = {"uri": _dir_uri(common)}

    def _base_of(self, bundle: Path) -> dict[str, str]:
        relative = relative_path(str(bundle.absolute()), self.root)
        if not Path(relative).is_absolute():
            return {"uri": quote(relative.rstrip("/") + "/", safe="/"), "uriBaseId": SRCROOT}
        return {"uri": _dir_uri(bundle.absolute())}

    def _absolute(self, source: str) -> Path | None:
        """The source's path when it lies outside the root (None when under it)."""
        path = relative_path(source, self.root)
        return Path(path) if Path(path).is_absolute() else None

    def artifact(self, source: str) -> dict[str, Any]:
        text = self.texts.get(source)
        if text is not None and text.bundle is not None and text.member is not None:
            return {"uri": quote(text.member, safe="/"), "uriBaseId": self.bundles[text.bundle],
                    "properties": {"hostPath": source}}
        outside = self._absolute(source)
        if outside is None:
            return {"uri": quote(relative_path(source, self.root), safe="/"), "uriBaseId": SRCROOT}
        if self.scan_root is None:  # a source that is no scanned text (an error file, a package list)
            self.scan_root = outside.parent
            self.bases[SCANROOT] = {"uri": _dir_uri(outside.parent)}
        try:
            inner = outside.relative_to(self.scan_root).as_posix()
        except ValueError:  # not under the folder of the scanned texts: it keeps its absolute path
            return {"uri": outside.as_uri()}
        return {"uri": quote(inner, safe="/"), "uriBaseId": SCANROOT}


def _dir_uri(path: Path) -> str:
    return path.as_uri().rstrip("/") + "/"


def artifact_location(source: str, root: Path) -> dict[str, Any]:
    return Locator((), root).artifact(source)


def _location(item: EvidenceItem, locator: Locator, location_id: int | None = None) -> dict[str, Any]:
    text = strip_ansi(item.text)
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": locator.artifact(item.source),
            "region": {"startLine": item.line, "snippet": {"text": text}},
        },
        "message": {"text": one_line(text) or item.location()},
    }
    if location_id is not None:
        location["id"] = location_id
    return location


def _message(cause: Cause) -> str:
    lines = [cause.title, "", cause.explanation]
    if cause.fix:
        lines += ["", "Fix:"] + [f"- {step}" for step in cause.fix]
    if cause.explains:
        lines += ["", "Explains: " + ", ".join(cause.explains)]
    return "\n".join(lines)


def _fact_location(facts: list[EvidenceItem], anchor: str, locator: Locator) -> dict[str, Any]:
    """GitHub shows no alert without a file location: a cause resting on collected facts (tmux
    state, a missing log) is pinned to line 1 of the first scanned input, and says so."""
    said = "; ".join(f"{f.source}: {one_line(f.text, 200)}" for f in facts) or "no line evidence"
    return {
        "physicalLocation": {"artifactLocation": locator.artifact(anchor), "region": {"startLine": 1}},
        "message": {"text": f"Not a line of this file: the cause rests on collected facts ({said})."},
    }


def result(cause: Cause, rule_index: int, locator: Locator, anchor: str | None = None) -> dict[str, Any]:
    """anchor: the input a cause without file lines is pinned to (None: no location)."""
    lines = [item for item in cause.evidence if is_file_evidence(item)]
    facts = [item for item in cause.evidence if not is_file_evidence(item)]
    entry: dict[str, Any] = {
        "ruleId": cause.id,
        "ruleIndex": rule_index,
        "level": LEVEL.get(cause.severity, "warning"),
        "message": {"text": _message(cause)},
        "partialFingerprints": {LINE_HASH_KEY: line_hash(cause, lines[0] if lines else None),
                                FINGERPRINT_KEY: fingerprint(cause)},
        "rank": round(min(max(cause.score, 0.0), 1.0) * 100, 1),
        "properties": {
            "severity": cause.severity, "role": cause.role, "category": cause.category,
            "confidence": cause.confidence, "score": cause.score, "relaunch": cause.relaunch,
            "explains": list(cause.explains), "references": list(cause.references),
            "facts": [{"source": f.source, "text": f.text} for f in facts],
        },
    }
    if lines:
        entry["locations"] = [_location(item, locator) for item in lines[:MAX_LOCATIONS]]
        related = lines[MAX_LOCATIONS:MAX_LOCATIONS + MAX_RELATED]
        if related:
            entry["relatedLocations"] = [_location(item, locator, n) for n, item in enumerate(related, 1)]
    elif anchor is not None:
        entry["locations"] = [_fact_location(facts, anchor, locator)]
    return entry


def automation_id(category: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """automationDetails.id: `<category>/` from --sarif-category (or DIAGNOSE_SARIF_CATEGORY);
    in GitHub Actions `diagnose/<workflow>/<job>/` plus the matrix values when DIAGNOSE_MATRIX
    holds them (`${{ toJSON(matrix) }}`; the runner exports no matrix of its own); None elsewhere."""
    environ = os.environ if env is None else env
    chosen = category or environ.get("DIAGNOSE_SARIF_CATEGORY") or None
    if chosen is None and environ.get("GITHUB_ACTIONS") == "true":
        parts = ["diagnose", environ.get("GITHUB_WORKFLOW", ""), environ.get("GITHUB_JOB", "")]
        parts.extend(_matrix_values(environ.get("DIAGNOSE_MATRIX", "")))
        chosen = "/".join(p for p in parts if p)
    if not chosen:
        return None
    chosen = " ".join(chosen.split())
    return chosen if chosen.endswith("/") else chosen + "/"


def _matrix_values(text: str) -> list[str]:
    """`{"python": "3.11", "gpu": "a100"}` -> ["gpu:a100", "python:3.11"] (sorted, so the order the
    workflow lists them in does not matter)."""
    if not text.strip() or text.strip() == "null":
        return []
    try:
        matrix = json.loads(text)
    except ValueError:
        return [" ".join(text.split())[:200]]
    if not isinstance(matrix, dict):
        return [json.dumps(matrix, sort_keys=True)[:200]]
    return [f"{key}:{json.dumps(value, sort_keys=True) if not isinstance(value, str) else value}"
            for key, value in sorted(matrix.items())]


def to_sarif(diagnosis: Diagnosis, rules: Mapping[str, Rule] | None = None, root: Path | None = None,
             category: str | None = None) -> dict[str, Any]:
    base = root or scan_root()
    locator = Locator(diagnosis.evidence.texts, base)
    table: Mapping[str, Rule] = rules or {}
    descriptors: list[dict[str, Any]] = [rule_descriptor(table[rule_id]) for rule_id in sorted(table)]
    known = {d["id"] for d in descriptors}
    for engine_cause in ENGINE_CAUSES.values():  # always described: GitHub keys its alerts on them
        if engine_cause.id not in known:
            descriptors.append(engine_descriptor(engine_cause))
            known.add(engine_cause.id)
    for cause in diagnosis.causes:
        if cause.id not in known:
            descriptors.append(cause_descriptor(cause))
            known.add(cause.id)
    index = {d["id"]: n for n, d in enumerate(descriptors)}
    files = [t.display for t in diagnosis.evidence.texts] or inputs(diagnosis)
    anchor = files[0] if files else None
    run = diagnosis.evidence.run
    sarif_run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "diagnose",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": HOMEPAGE,
                "rules": descriptors,
            }
        },
        "invocations": [{
            "executionSuccessful": True,
            "toolExecutionNotifications": [
                {"level": "warning", "message": {"text": f"could not check {gap.source}: {gap.reason}"}}
                for gap in diagnosis.gaps
            ],
        }],
        "results": [result(cause, index[cause.id], locator, anchor) for cause in diagnosis.causes],
        "columnKind": "unicodeCodePoints",
        "properties": {
            "run": {"id": run.id, "mode": run.mode, "host": run.host, "launcher": run.launcher},
            "stats": _json_safe(diagnosis.stats),
            "skipped": [{"rule": s.rule_id, "reason": s.reason} for s in diagnosis.skipped],
            "notes": list(diagnosis.evidence.notes),
        },
    }
    sarif_run["originalUriBaseIds"] = locator.bases  # after the results: they may add SCANROOT
    automation = automation_id(category)
    if automation is not None:
        sarif_run["automationDetails"] = {"id": automation}
    return {"$schema": SCHEMA_URI, "version": SARIF_VERSION, "runs": [sarif_run]}


def _json_safe(stats: Mapping[str, object]) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool)) or v is None else str(v) for k, v in stats.items()}


def report(diagnosis: Diagnosis, out: IO[str], verbose: bool = False, *,
           rules: Mapping[str, Rule] | None = None, fail_on: str = "error", category: str | None = None) -> None:
    json.dump(to_sarif(diagnosis, rules, category=category), out, indent=2, ensure_ascii=False)
    out.write("\n")
