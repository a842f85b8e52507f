"""Markdown for issues and PRs: ranked causes, evidence in fenced blocks no log line can break,
fixes; rendered with a real CommonMark parser (markdown-it-py, which rich already depends on)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from markdown_it import MarkdownIt

from diagnose.app import diagnose
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.report.markdown import code_span, escape_inline, fenced, render_markdown
from diagnose.rules.model import RuleSet
from tests.support.paths import REPO
from tests.support.report import CASES, CI, invoke, markdown_fences, working_dir

MD = MarkdownIt("commonmark").enable("table")


def code_blocks(rendered: str) -> list[str]:
    return [html.unescape(b) for b in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.S)]


def test_causes_ranked_with_evidence_and_fixes(tmp_path: Path) -> None:
    both = [*CASES["oom-cgroup"], *CASES["shape-mismatch"]]
    ranked = [c["id"] for c in json.loads(invoke(["scan", *both, "--format", "json"]).stdout)["causes"]]
    result = invoke(["scan", *both, "--format", "markdown"])
    assert result.exit_code == 1
    out = result.stdout
    headings = re.findall(r"^### (\d+)\. ", out, re.M)
    assert [int(n) for n in headings] == list(range(1, len(headings) + 1))
    positions = [out.index(f"`{cause_id}`") for cause_id in ranked]
    assert positions == sorted(positions), "causes out of rank order"
    rendered = MD.render(out)
    blocks = code_blocks(rendered)
    kill_line = next(line for line in (CI / "oom-cgroup" / "dmesg.txt").read_text().splitlines()
                     if "Killed process 6139" in line)
    assert any(kill_line in block for block in blocks), "the evidence line is not shown verbatim in a code block"
    assert "<strong>Fix</strong>" in rendered and "<li>" in rendered


def test_log_text_outside_code_is_not_markup() -> None:
    # The unrecognised crash: its title quotes the exception (state_dict, MLP:) and its evidence
    # holds frames and torch.Size([128, 32]); nothing of it may turn into emphasis or links.
    with working_dir(REPO):
        diagnosis = diagnose(evidence_from_paths(CASES["shape-mismatch"]), RuleSet([]))
        out = render_markdown(diagnosis)
    rendered = MD.render(out)
    assert "Error(s) in loading state_dict for MLP:" in html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert "<em>" not in rendered
    blocks = code_blocks(rendered)
    assert any('module.py", line 2638, in load_state_dict' in block for block in blocks)
    assert "<a " not in rendered
    assert any("\tsize mismatch for encoder.0.weight" in block for block in blocks)


def test_backticks_in_log_lines_cannot_close_the_fence() -> None:
    # A real wandb line with backticks, and the same line with longer runs added as test input.
    real = next(line for line in (CI / "healthy" / "train.log").read_text().splitlines() if "`offline`" in line)
    lines = [real, "```", real + " ````", "`````"]
    block = fenced(lines)
    ((fence, body),) = markdown_fences(block)
    assert body == lines and len(fence) == 6
    (rendered,) = code_blocks(MD.render(block))
    assert rendered.rstrip("\n").split("\n") == lines


def test_inline_escapes_render_as_the_text_itself() -> None:
    samples = [
        "python3 (pid 6139) was killed: *args, **kwargs, __init__, a|b, <module>, [x](y), ~/x, &amp;",
        "# not a heading",
        "- not a list",
        "1. not a list either",
        "> not a quote",
    ]
    for text in samples:
        rendered = MD.render(escape_inline(text))
        assert rendered.startswith("<p>"), (text, rendered)
        assert html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip() == text


def test_code_span_holds_backticks() -> None:
    for text in ("plain", "a `tick` b", "``double``", "`edge"):
        rendered = MD.render(code_span(text))
        (inner,) = re.findall(r"<code>(.*?)</code>", rendered)
        assert html.unescape(inner) == text


def test_healthy_run_says_so() -> None:
    result = invoke(["scan", *CASES["healthy"], "--format", "markdown"])
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first.startswith("## diagnose: ") and "at or above" not in first
    if first == "## diagnose: no cause found at warning or above":
        assert "```" not in result.stdout
