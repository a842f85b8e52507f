"""`diagnose rules show | lint | new`: render a rule, check a rule pack, scaffold a rule.

No click here: cli.py parses options and prints what these functions return. The lint codes
are a stable interface (scripts and CI match on them); docs/rules.md lists every one. A code is
never reused for another meaning; new checks get new codes.
"""

from __future__ import annotations

import re
import string
import textwrap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from diagnose.engine.causes import ENGINE_CAUSES, EngineCause
from diagnose.errors import DiagnoseError
from diagnose.evidence.lines import GLOG_HEADER, strip_prefix
from diagnose.evidence.model import normalise_package
from diagnose.rules.conditions import FACT_KINDS, FactCondition
from diagnose.rules.extensions import ANALYZER_CAPTURES
from diagnose.rules.load import builtin_rules_dir, load_rule_file, rule_files
from diagnose.rules.model import ID_SHAPE, Condition, Group, Rule, TextCondition
from diagnose.rules.testcase import old_spellings
from diagnose.rules.yamlnodes import Problems
from diagnose.vocab import is_crash_level

# ---------------------------------------------------------------- show


def describe_condition(cond: Condition, indent: int = 0, item: bool = False) -> list[str]:
    """The condition tree as indented lines, nested the way the YAML writes it."""
    pad = " " * indent + ("- " if item else "")
    if isinstance(cond, Group):
        lines = [f"{pad}{cond.op}:"]
        for child in cond.children:
            lines.extend(describe_condition(child, len(pad) + 2, item=True))
        return lines
    if isinstance(cond, TextCondition):
        return [f"{pad}{cond.kind.value}: {cond.pattern}"]
    fields = ", ".join(f"{name}: {pred.text}" for name, pred in cond.tests.items())
    return [f"{pad}{cond.kind}: {{{fields}}}"]


def _wrap(text: str, indent: str = "  ", width: int = 100) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), width=width, initial_indent=indent, subsequent_indent=indent) or [indent]


def _captures_lines(rule: Rule) -> list[str]:
    """`captures:` what {placeholders} the rule can fill: its conditions' named groups and fact
    captures, and what its analyzer adds (rules/extensions.py), which no line of the YAML shows."""
    own = sorted(capturable(rule.when))
    added = sorted(ANALYZER_CAPTURES.get(rule.analyze or "", frozenset()) - set(own))
    parts = [", ".join(own)] if own else []
    if added:
        parts.append(f"from the analyzer {rule.analyze}: " + ", ".join(added))
    text = "; ".join(parts) or "(none)"
    wrapped = textwrap.wrap(text, width=100, initial_indent="  captures:   ", subsequent_indent=" " * 14)
    return wrapped or ["  captures:   (none)"]


def show_rule(rule: Rule) -> str:
    """Every field of a rule, rendered for a terminal (placeholders left as written)."""
    matches = sum(1 for t in rule.tests if t.should_match)
    lines = [
        f"{rule.id}  ({'built-in' if rule.builtin else 'user'} rule)",
        f"  title:      {rule.title}",
        f"  category:   {rule.category}",
        f"  role:       {rule.role}",
        f"  severity:   {rule.severity}",
        f"  confidence: {rule.confidence:g}",
        f"  relaunch:   {rule.relaunch or '(not set)'}",
    ]
    if rule.analyze:
        lines.append(f"  analyze:    {rule.analyze}")
    lines.append("  when:")
    lines.extend(describe_condition(rule.when, 4))
    lines.extend(_captures_lines(rule))
    lines.append("  explanation:")
    lines.extend(_wrap(rule.explanation, "    "))
    lines.append("  fix:")
    for item in rule.fix:
        wrapped = _wrap(item, "      ")
        lines.append("    - " + wrapped[0].lstrip())
        lines.extend(wrapped[1:])
    lines.append("  references:" + ("" if rule.references else " (none)"))
    lines.extend(f"    - {ref}" for ref in rule.references)
    lines.append(f"  tests:      {len(rule.tests)} ({matches} match, {len(rule.tests) - matches} no_match)")
    lines.append(f"  file:       {rule.path}")
    return "\n".join(lines)


def show_engine_cause(cause: EngineCause) -> str:
    """A cause the engine makes with no rule file (engine/causes.py), shown as a rule is."""
    lines = [
        f"{cause.id}  (made by the engine)",
        f"  title:      {cause.title}",
        f"  category:   {cause.category}",
        f"  role:       {cause.role}",
        f"  severity:   {cause.severity}",
        f"  confidence: {cause.confidence:g}",
        f"  relaunch:   {cause.relaunch}",
        "  when:",
    ]
    lines.extend(_wrap(cause.made_when, "    "))
    lines.append("  explanation:")
    lines.extend(_wrap(cause.explanation, "    "))
    lines.append("  fix:")
    for item in cause.fix:
        wrapped = _wrap(item, "      ")
        lines.append("    - " + wrapped[0].lstrip())
        lines.extend(wrapped[1:])
    lines.append("  references: (none)")
    lines.append(f"  file:       {cause.source}")
    return "\n".join(lines)


def show(item: Rule | EngineCause) -> str:
    return show_rule(item) if isinstance(item, Rule) else show_engine_cause(item)


def list_rows(rules: Sequence[Rule], category: str | None = None) -> list[tuple[str, str, str, str, str]]:
    """`rules list`: (id, category, severity, title, origin) of every rule and every cause the
    engine makes, by id. Origin: "" (built-in), "user" or "engine"."""
    rows = [(r.id, r.category, str(r.severity), r.title, "" if r.builtin else "user") for r in rules]
    ids = {r.id for r in rules}
    rows += [(c.id, c.category, str(c.severity), c.title, "engine") for c in ENGINE_CAUSES.values() if c.id not in ids]
    return sorted((row for row in rows if category in (None, row[1])), key=lambda row: row[0])


def find_rule(rules: Sequence[Rule], rule_id: str) -> Rule | EngineCause:
    """The rule of that id, else the engine's own cause of that id (rules list shows both)."""
    for rule in rules:
        if rule.id == rule_id:
            return rule
    if rule_id in ENGINE_CAUSES:
        return ENGINE_CAUSES[rule_id]
    import difflib

    close = difflib.get_close_matches(rule_id, [r.id for r in rules] + list(ENGINE_CAUSES), n=3)
    hint = f" (did you mean: {', '.join(close)}?)" if close else " (see: diagnose rules list)"
    raise DiagnoseError(f"no rule with id '{rule_id}'{hint}")


# ---------------------------------------------------------------- lint

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class LintCode:
    code: str
    name: str
    severity: str
    meaning: str


# Stable: documented in docs/rules.md, which a test holds to this table.
LINT_CODES: dict[str, LintCode] = {c.code: c for c in (
    LintCode("DL001", "load-error", ERROR, "The file cannot be loaded as a rule (YAML, a missing or unknown field, a bad regex, a bad value, an empty fix)."),
    LintCode("DL101", "catastrophic-backtracking", ERROR,
             "A pattern can backtrack catastrophically: a repeat whose body can match one text in several ways ((a+)+, (a|ab)+, (a?)+) or long repeats in a row over shared characters (static check), or it ran over the time limit on an adversarial 16 KiB line (torture check)."),
    LintCode("DL102", "leading-wildcard", WARNING, "A pattern starts with .* or .+ : it costs a scan of every line and adds nothing to an unanchored search."),
    LintCode("DL110", "matches-healthy-fixture", ERROR,
             "The rule fires on a healthy run (fixtures/healthy-*/). An error when the rule is a root cause at severity error or critical; a warning otherwise."),
    LintCode("DL201", "missing-positive-test", ERROR, "The rule has no `tests.match` case."),
    LintCode("DL202", "missing-negative-test", ERROR, "The rule has no `tests.no_match` case."),
    LintCode("DL203", "placeholder-text", WARNING, "The rule still holds scaffold text (TODO) in its title, explanation, fix or tests."),
    LintCode("DL204", "old-test-key", WARNING,
             "A test case uses an older spelling (packages, files, exits, tmux expected_session, checkpoint newest_age): it still reads, but a test case's keys are the condition keys now."),
    LintCode("DL301", "missing-relaunch", ERROR, "The rule does not say whether a plain relaunch can help (relaunch: yes | no | maybe)."),
    LintCode("DL302", "missing-references", WARNING,
             "The rule cites no public report (references) and no fixture names it in expect.yaml: nothing shows the pattern is true to real output."),
    LintCode("DL401", "unreachable-condition", ERROR,
             "The rule can never match: a condition that must hold is also excluded by a `none`, or an `any` has only children that are excluded."),
    LintCode("DL402", "duplicate-condition", WARNING, "Two children of the same all / any / none are identical."),
    LintCode("DL403", "unknown-placeholder", ERROR,
             "A {placeholder} in the title, explanation or fix names a capture that no condition of the rule can provide (regex named groups and the capture names of fact kinds; conditions under `none` provide none)."),
    LintCode("DL501", "wrong-folder", WARNING, "The rule file does not live in the folder of its category (rules/<category>/<id>.yaml)."),
)}


@dataclass(frozen=True)
class LintIssue:
    code: str
    path: Path
    line: int
    rule_id: str
    message: str
    severity: str = ""

    @property
    def level(self) -> str:
        return self.severity or LINT_CODES[self.code].severity

    def render(self) -> str:
        who = f"{self.rule_id}: " if self.rule_id else ""
        return f"{self.path}:{self.line}: {self.code} {LINT_CODES[self.code].name} [{self.level}] {who}{self.message}"


def fact_captures(cond: FactCondition) -> set[str]:
    names = set(FACT_KINDS[cond.kind].captures)
    if cond.kind == "package" and "name" in cond.tests:
        raw = cond.tests["name"].text
        listed = re.findall(r"[A-Za-z0-9][A-Za-z0-9_.-]*", raw) if raw.startswith("[") else [raw]
        names.update(re.sub(r"\W", "_", normalise_package(n)) + "_version" for n in listed)
    return names


def _pattern_groups(pattern: str) -> set[str]:
    import regex

    try:
        return set(regex.compile(pattern).groupindex)
    except regex.error:
        return set()


def capturable(cond: Condition, under_none: bool = False) -> set[str]:
    """Capture names a condition tree can deliver to the explanation (none-branches deliver none)."""
    if isinstance(cond, Group):
        out: set[str] = set()
        for child in cond.children:
            out |= capturable(child, under_none or cond.op == "none")
        return out
    if under_none:
        return set()
    if isinstance(cond, TextCondition):
        return _pattern_groups(cond.pattern)
    return fact_captures(cond)


def placeholders(text: str) -> set[str]:
    try:
        return {name for _lit, name, _spec, _conv in string.Formatter().parse(text) if name}
    except ValueError:
        return set()


def _key(cond: Condition) -> tuple[object, ...]:
    if isinstance(cond, TextCondition):
        return ("text", cond.kind.value, cond.pattern)
    if isinstance(cond, FactCondition):
        return ("fact", cond.kind, tuple(sorted((k, v.text) for k, v in cond.tests.items())))
    return ("group", cond.op, tuple(_key(c) for c in cond.children))


def _required_and_forbidden(group: Group) -> tuple[dict[tuple[object, ...], int], dict[tuple[object, ...], int], list[Group]]:
    """Leaf conditions that must be true / must be false for the rule to match, following only
    `all` chains (a single-child `any` counts as required), and the `any` groups met on the way."""
    required: dict[tuple[object, ...], int] = {}
    forbidden: dict[tuple[object, ...], int] = {}
    anys: list[Group] = []
    stack: list[tuple[Condition, bool]] = [(group, True)]
    while stack:
        cond, positive = stack.pop()
        if isinstance(cond, Group):
            if not positive:
                # Under a `none` only plain conditions, or the members of an `any`, are excluded
                # one by one; none(all(A, B)) does not exclude A alone.
                if cond.op == "any":
                    stack.extend((child, False) for child in cond.children if not isinstance(child, Group))
            elif cond.op == "all" or (cond.op == "any" and len(cond.children) == 1):
                stack.extend((child, True) for child in cond.children)
            elif cond.op == "none":
                stack.extend((child, False) for child in cond.children)
            elif cond.op == "maybe":
                continue
            else:
                anys.append(cond)
            continue
        (required if positive else forbidden).setdefault(_key(cond), cond.line)
    return required, forbidden, anys


def _groups(cond: Condition) -> Iterator[Group]:
    if isinstance(cond, Group):
        yield cond
        for child in cond.children:
            yield from _groups(child)


def lint_structure(rule: Rule, fixture_names: Iterable[str] = ()) -> list[LintIssue]:
    """Every check that needs only the rule itself (no scanning)."""
    from diagnose.patterns.hangcheck import static_problem, torture_problem

    issues: list[LintIssue] = []

    def add(code: str, line: int, message: str, severity: str = "") -> None:
        issues.append(LintIssue(code, rule.path, line, rule.id, message, severity))

    for cond in rule.conditions(TextCondition):
        problem = static_problem(cond.pattern) or torture_problem(cond.pattern)
        if problem:
            add("DL101", cond.line, f"{cond.pattern!r}: {problem}")
        if re.match(r"^\(?\??:?\.[*+]", cond.pattern):
            add("DL102", cond.line, f"{cond.pattern!r} starts with a wildcard")
    if not any(t.should_match for t in rule.tests):
        add("DL201", 1, "add a tests.match case made from a real log line (say where it comes from in `note`)")
    if not any(not t.should_match for t in rule.tests):
        add("DL202", 1, "add a tests.no_match case (a real line that must not match, e.g. from a healthy run)")
    texts = [rule.title, rule.explanation, *rule.fix] + [str(t.case.get("note", "")) for t in rule.tests]
    if any("TODO" in text for text in texts):
        add("DL203", 1, "replace the TODO scaffold text")
    for test in rule.tests:
        for spelt, instead in old_spellings(test.case):
            add("DL204", test.line, f"test case key {spelt}: write {instead} (a test case's keys are the condition keys)")
    if rule.relaunch is None:
        add("DL301", 1, "add relaunch: yes | no | maybe")
    if not rule.references and not any(rule.id == name for name in fixture_names):
        add("DL302", 1, "add references (URL of a public report or the source) or a fixture whose expect.yaml names the rule")

    required, forbidden, anys = _required_and_forbidden(rule.when)
    for key, line in required.items():
        if key in forbidden:
            add("DL401", forbidden[key], f"{_show_key(key)} must match (line {line}) and must not match (line {forbidden[key]})")
    for group in anys:
        keys = [_key(c) for c in group.children]
        if keys and all(k in forbidden for k in keys):
            add("DL401", group.line, "every child of this `any` is excluded by a `none`")
    for group in _groups(rule.when):
        seen: dict[tuple[object, ...], int] = {}
        for child in group.children:
            key = _key(child)
            if key in seen:
                line = child.line if not isinstance(child, Group) else group.line
                add("DL402", line, f"{_show_key(key)} appears twice in the same `{group.op}`")
            seen.setdefault(key, getattr(child, "line", group.line))
    # an analyzer adds the captures that rules/extensions.py declares for it
    known = capturable(rule.when) | ANALYZER_CAPTURES.get(rule.analyze or "", frozenset())
    for where, text in (("title", rule.title), ("explanation", rule.explanation), *(("fix", f) for f in rule.fix)):
        for name in sorted(placeholders(text) - known):
            add("DL403", 1, f"{{{name}}} in {where}: no condition or analyzer captures '{name}' (known: {', '.join(sorted(known)) or 'none'})")
    if rule.path.parent.name != rule.category:
        add("DL501", 1, f"category '{rule.category}' but the file is in '{rule.path.parent.name}/'")
    return issues


def _show_key(key: tuple[object, ...]) -> str:
    if key[0] == "text":
        return f"{key[1]}: {key[2]!r}"
    if key[0] == "fact":
        fields = ", ".join(f"{k}: {v}" for k, v in key[2])  # type: ignore[attr-defined]
        return f"{key[1]}: {{{fields}}}"
    return f"a `{key[1]}` group"


def healthy_fixtures(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("healthy-*/expect.yaml"))


def lint_healthy(rules: Sequence[Rule], fixtures: Sequence[Path], engine: str = "auto") -> list[LintIssue]:
    """Scan each healthy fixture; every rule that fires there is too generic (DL110).

    Rules are evaluated independently of each other, so one scan with all of them finds exactly
    what a scan with each rule alone would."""
    from diagnose.engine.evaluate import run_rules
    from diagnose.evidence.bundle import evidence_from_bundle

    issues: list[LintIssue] = []
    for fixture in fixtures:
        evidence = evidence_from_bundle(fixture)
        for finding in run_rules(rules, evidence, engine=engine).findings:
            rule = finding.rule
            serious = is_crash_level(rule.role, rule.severity)
            where = ", ".join(f"{e.location()}: {e.text[:120]!r}" for e in finding.evidence[:2])
            line = next((c.line for c in rule.conditions(TextCondition)), 1)
            issues.append(LintIssue("DL110", rule.path, line, rule.id, f"fires on healthy fixture {fixture.name} ({where})",
                                    ERROR if serious else WARNING))
    return issues


@dataclass
class LintReport:
    issues: list[LintIssue]
    rules: int
    files: int

    @property
    def errors(self) -> int:
        return sum(1 for i in self.issues if i.level == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for i in self.issues if i.level == WARNING)


def _load_problem(item: str) -> LintIssue:
    match = re.match(r"^(?P<path>.+?):(?P<line>\d+): (?P<message>.*)$", item)
    if not match:
        return LintIssue("DL001", Path("?"), 1, "", item)
    return LintIssue("DL001", Path(match["path"]), int(match["line"]), "", match["message"])


def lint_paths(paths: Sequence[Path], fixtures_root: Path | None = None, healthy: bool = True, engine: str = "auto") -> LintReport:
    """Lint rule files (PATHs: files or folders; none: the built-in pack)."""
    targets: list[Path] = []
    for path in paths or [builtin_rules_dir()]:
        if not path.exists():
            raise DiagnoseError(f"{path}: no such file or directory")
        targets.extend([path] if path.is_file() else rule_files(path))
    if fixtures_root is None:
        fixtures_root = builtin_rules_dir().parent / "fixtures"
    expect_texts = [p.read_text(encoding="utf-8", errors="replace") for p in fixtures_root.glob("*/expect.yaml")] if fixtures_root.is_dir() else []
    named = {m for text in expect_texts for m in re.findall(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)+", text)}

    issues: list[LintIssue] = []
    rules: list[Rule] = []
    for path in targets:
        problems = Problems()
        # The hang checks run below as DL101, so loading does not stop at the first slow pattern.
        rule = load_rule_file(path, problems, check_hang=False)
        issues.extend(_load_problem(item) for item in problems.items)
        if rule is not None:
            rules.append(rule)
            issues.extend(lint_structure(rule, named))
    if healthy and rules and fixtures_root.is_dir():
        issues.extend(lint_healthy(rules, healthy_fixtures(fixtures_root), engine))
    issues.sort(key=lambda i: (str(i.path), i.line, i.code))
    return LintReport(issues, len(rules), len(targets))


# ---------------------------------------------------------------- new

_META = set(".^$*+?{}[]\\|()")
# Order matters: a hex run (has a-f and a digit) before plain digits.
_TOKEN = re.compile(r"(?P<hexnum>0x[0-9a-fA-F]+)|(?P<hex>(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{6,}(?![0-9A-Za-z]))|(?P<digits>\d+)")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s*")
# What goes before the words of a line: a launcher's rank prefix, a timestamp, a glog header.
_HEADS: tuple[Callable[[str], str], ...] = (
    strip_prefix,
    lambda body: _TIMESTAMP.sub("", body, count=1),
    lambda body: GLOG_HEADER.sub("", body, count=1),
)


def _escape(text: str) -> str:
    # Control characters (\r of progress bars, ESC) become \xNN so the YAML stays one line.
    return "".join("\\" + ch if ch in _META else f"\\x{ord(ch):02x}" if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)


def pattern_from_line(line: str) -> str:
    """A regex for one real log line: escaped, numbers as \\d+, hex ids as [0-9a-f]+, leading
    timestamps and [rankN]: prefixes dropped (rules stay unanchored, so the line still matches)."""
    body = strip_prefix(line.strip()).strip() or line.strip()  # launchers' prefixes (lines.split_prefix)
    changed = True
    while changed:
        changed = False
        for head in _HEADS:
            stripped = head(body).lstrip()
            if stripped != body and stripped.strip():
                body, changed = stripped, True
    out: list[str] = []
    pos = 0
    for match in _TOKEN.finditer(body):
        out.append(_escape(body[pos:match.start()]))
        out.append("0x[0-9a-fA-F]+" if match.group("hexnum") else "[0-9a-f]+" if match.group("hex") else r"\d+")
        pos = match.end()
    out.append(_escape(body[pos:]))
    return "".join(out)


def _yaml_str(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid YAML double-quoted scalar


def _yaml_single(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scaffold_text(rule_id: str, from_line: str | None) -> str:
    category = rule_id.split(".", 1)[0]
    if from_line is not None:
        pattern = pattern_from_line(from_line)
        match_case = f"    - note: {_yaml_str('TODO: where this real line comes from (capture path or public report URL)')}\n      log: {_yaml_str(from_line)}\n"
    else:
        pattern = "TODO the error line, regex-escaped"
        match_case = f"    - note: {_yaml_str('TODO: replace with a real log line and say where it comes from')}\n      log: {_yaml_str(pattern)}\n"
    return (
        f"id: {rule_id}\n"
        f"title: {_yaml_str('TODO: one line naming the cause')}\n"
        f"category: {category}\n"
        "role: root                 # root | symptom | context\n"
        "severity: error            # critical | error | warning | info\n"
        "confidence: 0.5\n"
        "when:\n"
        "  any:\n"
        f"    - log: {_yaml_single(pattern)}\n"
        "explanation: >-\n"
        "  TODO: what happened and why, in a few sentences (named groups of the pattern can be used as {{name}}).\n"
        "fix:\n"
        f"  - {_yaml_str('TODO: what to do, and whether a plain relaunch can help')}\n"
        "relaunch: maybe            # yes | no | maybe\n"
        "references: []             # URLs of public reports of this message\n"
        "tests:\n"
        "  match:\n"
        f"{match_case}"
        "  no_match:\n"
        f"    - note: {_yaml_str('TODO: a real line that must not match (e.g. from a healthy run)')}\n"
        "      log: \"\"\n"
    )


def scaffold_rule(rule_id: str, from_line: str | None, directory: Path) -> Path:
    """Write <directory>/<category>/<id>.yaml; never overwrites. Returns the path written."""
    if not ID_SHAPE.match(rule_id):
        raise DiagnoseError(f"rule id '{rule_id}' must be dotted lowercase: <category>.<name> (e.g. compile.my-error)")
    if from_line is not None and not from_line.strip():
        raise DiagnoseError("--from-line is empty: give the real log line the rule should match")
    category = rule_id.split(".", 1)[0]
    path = directory / category / f"{rule_id}.yaml"
    if path.exists():
        raise DiagnoseError(f"{path} already exists; refusing to overwrite it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(scaffold_text(rule_id, from_line))
    except FileExistsError:
        raise DiagnoseError(f"{path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise DiagnoseError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return path


def lint_summary(report: LintReport) -> str:
    return f"{report.files} file(s), {report.rules} rule(s): {report.errors} error(s), {report.warnings} warning(s)"


def codes_table() -> Mapping[str, LintCode]:
    return LINT_CODES
