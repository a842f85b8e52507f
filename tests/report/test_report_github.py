"""GitHub Actions output: `::error file=,line=,title=::` per evidence line, escaped as the Actions
toolkit escapes (so log text can never start a command of its own), GitHub's per-step limit,
and the Markdown job summary appended to $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.report.github import PER_KIND, annotation_lines, command, escape_data, escape_property, report
from diagnose.rules.model import RuleSet
from tests.support.paths import REPO
from tests.support.report import CASES, CI, invoke, parse_command, working_dir

KILL_LINE = next(line for line in (CI / "oom-cgroup" / "dmesg.txt").read_text().splitlines()
                 if "Killed process 6139" in line)


def test_escaping_follows_the_toolkit() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    # a real dmesg line is full of ':' and ',' — as a property it must survive the round trip
    line = command("error", KILL_LINE + "\nsecond line", {"file": "x,y:z.log", "line": 79, "title": KILL_LINE})
    assert "\n" not in line and line.count("::") == 2
    level, props, message = parse_command(line)
    assert (level, props, message) == ("error", {"file": "x,y:z.log", "line": "79", "title": KILL_LINE},
                                       KILL_LINE + "\nsecond line")


def test_no_log_text_can_start_a_workflow_command() -> None:
    # The text of a log line as the message: even one that itself looks like a command stays data.
    injected = command("warning", "done\n::add-mask::x\n::set-output name=a::b", {"title": "t"})
    assert injected.count("\n") == 0
    assert parse_command(injected)[2] == "done\n::add-mask::x\n::set-output name=a::b"


def test_one_error_per_evidence_line() -> None:
    result = invoke(["scan", *CASES["oom-cgroup"], "--format", "github"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    commands = [parse_command(line) for line in lines if line.startswith("::")]
    assert len(commands) == 1
    level, props, message = commands[0]
    assert level == "error"
    assert props["file"] == "tests/data/ci/oom-cgroup/dmesg.txt" and props["line"] == "79"
    assert "6139" in props["title"]  # the rule's title, with the pid it captured
    assert message.splitlines()[0] == KILL_LINE
    assert "[memory.host-oom-kill" in message and "Fix: " in message
    assert lines[-1] == "diagnose: 1 cause(s) at or above error: memory.host-oom-kill"


def test_per_step_limit_gives_every_cause_an_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    # Three real crashes with no rule loaded: three unrecognised causes, 22 error lines in all,
    # more than GitHub shows. Each cause gets its first line annotated before any gets a second.
    inputs = [*CASES["wandb-fakekey"], *CASES["shape-mismatch"], *CASES["hf-offline"]]
    with working_dir(REPO):
        diagnosis = diagnose(evidence_from_paths(inputs), RuleSet([]))
    assert len(diagnosis.causes) == 3 and sum(len(c.evidence) for c in diagnosis.causes) > PER_KIND
    lines, held = annotation_lines(diagnosis)
    assert len(lines) == PER_KIND and held == sum(len(c.evidence) for c in diagnosis.causes) - PER_KIND
    commands = [parse_command(line) for line in lines]
    files = {props["file"] for _, props, _ in commands[:3]}
    assert files == {Path(p).as_posix() for p in inputs}
    out = io.StringIO()
    report(diagnosis, out)
    assert f"{held} more annotation(s) held back" in out.getvalue()


def test_job_summary_is_appended(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    result = invoke(["scan", *CASES["oom-cgroup"], "--format", "github"], env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1
    text = summary.read_text()
    assert text.startswith("# earlier step\n## diagnose: 1 cause(s) at or above error")
    assert KILL_LINE in text and "`memory.host-oom-kill`" in text
    assert "## diagnose" not in result.stdout  # the summary goes to the file, not into the log


def test_no_summary_file_without_the_variable(tmp_path: Path) -> None:
    inputs = [str(REPO / p) for p in CASES["oom-cgroup"]]
    result = invoke(["scan", *inputs, "--format", "github"], cwd=tmp_path)
    assert result.exit_code == 1
    assert not list(tmp_path.iterdir())
    # outside the scanned root the annotation names the file by its absolute path
    assert parse_command(result.stdout.splitlines()[0])[1]["file"] == inputs[1]


@pytest.mark.parametrize("case", ["oom-cgroup", "healthy"])
def test_unwritable_summary_keeps_the_exit_code(case: str, tmp_path: Path) -> None:
    # A directory where the summary file should be: the summary is lost with a warning, and the
    # exit code still says what was found (1) or not (0) — never the tool-error 2.
    result = invoke(["scan", *CASES[case], "--format", "github"], env={"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert result.exit_code == (1 if case == "oom-cgroup" else 0)
    assert "cannot append the job summary" in result.stderr
