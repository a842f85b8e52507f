"""The terminal report's layout, on real fixtures, at 80 and 140 columns: what rich shows on a
terminal (a recording Console) and what a pipe gets are the same characters; no line runs past
the width; paragraphs keep their hanging indent and lose no word; evidence is in file order,
file:line first, the matched part highlighted and a long line cut around it; a multi-rank run
gets its ranks table; the last line is the verdict."""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from diagnose.app import diagnose
from diagnose.engine.findings import Diagnosis
from diagnose.evidence.bundle import evidence_from_bundle
from diagnose.report import terminal
from diagnose.report._common import verdict
from diagnose.report._layout import cells, cut, wrap
from diagnose.report.redact import redact_diagnosis
from tests.conftest import FIXTURES, run_cli
from tests.report_support import load_rules_cached

CASES = ("nccl-hang-2gpu", "seed-host-oom", "seed-flex7-tmux-died")
WIDTHS = (80, 140)
LOCATION = re.compile(r"^     (\S+?):(\d+)(?:  |$)")  # an evidence line's header: path:line first


@functools.cache
def diagnosis_of(case: str) -> Diagnosis:
    return redact_diagnosis(diagnose(evidence_from_bundle(FIXTURES / case), load_rules_cached()))


def rendered(case: str, width: int) -> tuple[str, str, str]:
    """(plain text, rich's text without styles, rich's text with its ANSI styles) at this width."""
    plain = io.StringIO()
    terminal.write(diagnosis_of(case), terminal.PlainWriter(plain, width))
    console = Console(record=True, width=width, file=io.StringIO(), force_terminal=True, color_system="standard",
                      highlight=False, emoji=False)
    terminal.write(diagnosis_of(case), terminal.RichWriter(console=console))
    return plain.getvalue(), console.export_text(styles=False, clear=False), console.export_text(styles=True)


def blocks(text: str) -> dict[int, list[str]]:
    """Each numbered cause's lines, by its number."""
    out: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        head = re.match(r"^(\d+)\. ", line)
        if head:
            current = out.setdefault(int(head.group(1)), [])
        elif line and not line.startswith(" "):
            current = None  # a section heading or the verdict ends the cause
        if current is not None:
            current.append(line)
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES)
def test_terminal_and_pipe_print_the_same_fitted_text(case: str, width: int) -> None:
    plain, recorded, styled = rendered(case, width)
    assert plain == recorded  # the same characters with and without colour
    assert "\x1b[" in styled and "\x1b[" not in plain
    for line in plain.splitlines():
        # wider only when one word is (a path kept whole, for the terminal to soft-wrap and copy as one)
        assert cells(line) <= width or len(line.split()) == 1, (width, line)
        assert line == line.rstrip(), f"trailing space: {line!r}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES)
def test_paragraphs_keep_their_indent_and_every_word(case: str, width: int) -> None:
    plain, _recorded, _styled = rendered(case, width)
    causes = [c for c in diagnosis_of(case).causes if c.role != "context" and c.severity != "info"]
    for number, cause in enumerate(causes, 1):
        lines = blocks(plain)[number]
        title_rows = next(i for i, line in enumerate(lines) if line.startswith(f"   {cause.severity}") or
                          line.startswith(f"    {cause.severity}"))
        assert " ".join(" ".join(lines[:title_rows]).split()) == f"{number}. {cause.title}"
        explanation = lines[title_rows + 1:lines.index("   Evidence") if "   Evidence" in lines else lines.index("   Fix")]
        assert explanation and all(line.startswith("   ") and not line.startswith("    ") for line in explanation)
        assert " ".join(" ".join(explanation).split()) == " ".join(cause.explanation.split())
        fix = lines[lines.index("   Fix") + 1:]
        fix = fix[:next((i for i, line in enumerate(fix) if not line.startswith("     ")), len(fix))]
        steps = [i for i, line in enumerate(fix) if line.startswith("     • ")]
        assert len(steps) == len(cause.fix)
        for step_no, step in enumerate(cause.fix):
            start = steps[step_no]
            end = next((i for i in range(start + 1, len(fix)) if not fix[i].startswith("       ")), len(fix))
            assert all(line.startswith("       ") for line in fix[start + 1:end])
            assert " ".join(" ".join(fix[start:end]).split()) == "• " + " ".join(step.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_evidence_is_in_file_order_file_line_first(width: int) -> None:
    plain, _recorded, _styled = rendered("nccl-hang-2gpu", width)
    for number, lines in blocks(plain).items():
        locations = [(m.group(1), int(m.group(2))) for m in map(LOCATION.match, lines) if m]
        assert locations or number > 4, number
        seen: list[str] = []
        for path, _line_no in locations:
            if not seen or seen[-1] != path:
                assert path not in seen, f"cause {number}: {path} comes back after another file"
                seen.append(path)
        for path in seen:
            numbers = [n for p, n in locations if p == path]
            assert numbers == sorted(numbers), (number, path, numbers)


def test_the_matched_part_is_highlighted_and_the_evidence_is_not_dim() -> None:
    _plain, _recorded, styled = rendered("nccl-hang-2gpu", 140)
    # rich's standard colour codes: 1 bold, 4 underline, 2 dim, 36 cyan
    assert re.search(r"\x1b\[1;4mWatchdog caught collective operation timeout: WorkNCCL\(SeqNum=11, OpType=ALLREDUCE", styled)
    assert re.search(r"\x1b\[36m/workspace/ddp/nccl-hang\.log:18\x1b\[0m", styled)  # file:line, not dim
    line = next(seg for seg in styled.splitlines() if "NumelIn=520, NumelOut=520, Timeout(ms)=20000) ran for" in seg)
    assert "\x1b[2m" not in line.split("Watchdog")[0]  # the line itself is in normal weight


def test_a_long_line_is_cut_around_its_match_not_at_a_column() -> None:
    """At 80 columns the watchdog's exception line (nccl-hang.log:30, 262 characters) does not fit
    three rows: it is cut before the match, which stays whole, with what the fix refers to after it."""
    plain, _recorded, _styled = rendered("nccl-hang-2gpu", 80)
    lines = plain.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("     /workspace/ddp/nccl-hang.log:30"))
    body = []
    for line in lines[at + 1:]:
        if not line.startswith("       "):
            break
        body.append(line.strip())
    text = " ".join(body)
    assert text.startswith("…") and len(body) <= terminal.EVIDENCE_ROWS + 1
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE" in text
    assert "Timeout(ms)=20000" in text


def test_cut_keeps_the_match_on_real_lines() -> None:
    raw = (FIXTURES / "nccl-hang-2gpu" / "logs" / "nccl-hang.log").read_text().splitlines()
    line = raw[29]  # line 30: "... Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught ..."
    match = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE"
    assert line.find(match) > 150
    for budget in (60, 100, 140, 200, len(line) - 1):
        spans = cut(line, match, budget)
        shown = "".join(text for text, _ in spans)
        assert cells(shown) <= budget, budget
        kept = [text for text, style in spans if style == "match"]
        assert kept and (kept[0] == match or match.startswith(kept[0])), budget
        assert shown.replace("…", "") in line or all(part in line for part in shown.split("…") if part)
    assert cut(line, match, len(line)) == [(line[:line.find(match)], ""), (match, "match"),
                                           (line[line.find(match) + len(match):], "")]
    head = cut(line, "", 100)
    assert "".join(t for t, _ in head).endswith("…") and line.startswith(head[0][0])


def test_wrap_hangs_and_splits_only_what_fits_no_line() -> None:
    explanation = diagnosis_of("nccl-hang-2gpu").causes[0].explanation
    for width in (30, 80, 140):
        lines = ["".join(t for t, _ in line) for line in wrap([(explanation, "")], width, first="  - ", hang="    ")]
        assert lines[0].startswith("  - ") and all(line.startswith("    ") for line in lines[1:])
        assert all(cells(line) <= width for line in lines)
        assert " ".join(" ".join(lines).split()).removeprefix("- ") == " ".join(explanation.split())
    path = "/workspace/ddp/hang-logs/none_rzwgygsp/attempt_0/1/stderr.log:2"
    folded = ["".join(t for t, _ in line) for line in wrap([(path, "")], 30, first="  ")]
    assert all(cells(line) <= 30 for line in folded) and "".join(line.strip() for line in folded) == path
    whole = ["".join(t for t, _ in line) for line in wrap([("log " + path + " missing", "")], 30, first="  ", fold=False)]
    assert whole == ["  log", "  " + path, "  missing"]


@pytest.mark.parametrize("width", WIDTHS)
def test_multirank_run_gets_a_ranks_table_before_the_causes(width: int) -> None:
    plain, _recorded, _styled = rendered("nccl-hang-2gpu", width)
    lines = plain.splitlines()
    start = lines.index("Ranks")
    assert start < next(i for i, line in enumerate(lines) if line.startswith("1. "))
    assert re.match(r"^  rank +state +last line +first error$", lines[start + 1])
    table = "\n".join(lines[start + 2:lines.index("", start)])
    row0 = table[table.index("\n  0 ") if "\n  0 " in table else table.index("  0 "):]
    assert "watchdog timeout" in table and "SIGABRT" in table
    assert re.search(r"^  1\* +behind \(hung\)", table, re.MULTILINE)  # the rank the top cause blames
    assert "first:" in row0.split("\n  1*")[0]  # rank 0's watchdog timeout is the run's first failure
    assert "step 5:" in table and "waiting on slow" in table  # rank 1's last line
    for case in ("seed-host-oom", "seed-flex7-tmux-died"):
        assert "Ranks" not in rendered(case, width)[0].splitlines()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES)
def test_the_header_names_the_run_and_the_last_line_is_the_verdict(case: str, width: int) -> None:
    plain, _recorded, _styled = rendered(case, width)
    diagnosis = diagnosis_of(case)
    lines = plain.rstrip("\n").splitlines()
    state = {"crashed": "crashed", "never-started": "never started"}[str(diagnosis.state)]
    assert lines[0].startswith(f"{diagnosis.evidence.run.id}  {state}  ·  host ")
    tail = []
    for line in reversed(lines):
        if not line:
            break
        tail.insert(0, line)
    said = verdict(diagnosis)
    assert " ".join(" ".join(tail).split()) == said
    top = diagnosis.causes[0]
    assert said.startswith(f"{diagnosis.evidence.run.id}: ") and f"({top.id})" in said
    expected = {"nccl-hang-2gpu": "nccl-hang-2gpu: rank 1 stopped taking part in collectives (hung); the others timed "
                                  "out waiting (distributed.hung-rank) - fix first if you can, then relaunch; 5 more "
                                  "causes above",
                "seed-host-oom": "host-oom: the kernel OOM killer killed python3 (pid 6139) (memory.host-oom-kill) - "
                                 "relaunch after the fix",
                "seed-flex7-tmux-died": "flex7: the launch never started (launch.tmux-server-died) - fix first if you "
                                        "can, then relaunch"}
    assert said == expected[case]


def test_a_pipe_gets_the_same_layout_at_columns(tmp_path: Path) -> None:
    """Through the real CLI into a pipe: no colour, the layout of the plain writer at $COLUMNS."""
    for width in WIDTHS:
        result = run_cli([str(FIXTURES / "seed-flex7-tmux-died")], env={"COLUMNS": str(width)})
        assert result.returncode == 1, result.stderr
        assert "\x1b" not in result.stdout
        plain = io.StringIO()
        terminal.write(diagnosis_of("seed-flex7-tmux-died"), terminal.PlainWriter(plain, width))
        scrub = functools.partial(re.sub, r"in [0-9.]+ s\b", "in 0 s")
        assert scrub(result.stdout) == scrub(plain.getvalue())
        assert all(cells(line) <= width or len(line.split()) == 1 for line in result.stdout.splitlines())
