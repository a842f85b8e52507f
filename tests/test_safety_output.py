"""Hostile text in logs and file names reaches no output raw (issue item 8).

Two folders of real files on disk: one with hostile names and lines (terminal escapes, C1 CSI,
charset switches, bidi overrides, a non-UTF-8 name, a newline that would start a GitHub workflow
command, @mentions, rich markup), and its sanitised twin, where each dangerous piece is replaced
by the visible escape the tool prints for it. Every format must print the same report for both
(the renderer neutralised the pieces), and no output may hold a raw control, C1 or bidi character.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from diagnose.evidence.safetext import visible
from tests.conftest import run_cli

FORMATS = ("terminal", "json", "sarif", "junit", "markdown", "github", "html")

# (hostile, as the tool shows it). Pieces inside log lines survive the scanner's ANSI stripping
# (which removes CSI and OSC sequences from lines); file names are not stripped, so they carry
# the CSI/OSC pieces too.
LINE_PIECES = [
    ("\x1bc", "\\x1bc"),  # full reset (RIS)
    ("\x1b7", "\\x1b7"), ("\x1b8", "\\x1b8"),  # cursor save / restore (DEC)
    ("\x1b(0", "\\x1b(0"),  # line-drawing charset
    ("\x0e", "\\x0e"), ("\x0f", "\\x0f"),  # SO / SI
    ("\u009b2J", "\\x9b2J"),  # C1 CSI: clear screen
    ("\x07", "\\x07"), ("\x7f", "\\x7f"), ("\x08", "\\x08"),
    ("\u202e", "\\u202e"), ("\u202a", "\\u202a"), ("\u2066", "\\u2066"), ("\u2069", "\\u2069"),
]
NAME_PIECES = [
    ("\x1b[s", "\\x1b[s"), ("\x1b[u", "\\x1b[u"),  # CSI save / restore cursor
    ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # OSC: set the window title
    ("\x1b]8;;x\x1b\\", "\\x1b]8;;x\\x1b\\"),  # OSC 8 hyperlink
    ("\u202e", "\\u202e"),
]
MARKUP = "[rank0]: [bold red]boom[/bold red] [link=x]y[/link] @octocat <b>&amp;</b> *emph* `tick`"


def _pieces(pieces: list[tuple[str, str]], twin: bool) -> str:
    return "".join(shown if twin else raw for raw, shown in pieces)


def _write(folder: Path, twin: bool) -> None:
    """The files of one folder. Names start with a letter that fixes their order in both folders."""
    logs = folder / "logs"
    logs.mkdir(parents=True)
    line_bits = _pieces(LINE_PIECES, twin)
    name_bits = _pieces(NAME_PIECES, twin)

    def name(hostile: bytes, shown: str) -> bytes:
        return os.fsencode(shown) if twin else hostile

    oom = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
           f"of 139.81 GiB {line_bits} {MARKUP}\n")
    files = {
        # not UTF-8: Python keeps the bytes as lone surrogates ('\udcff'), no encoder takes them
        name(b"a-\xff\xfe.log", "a-\\xff\\xfe.log"): oom,
        # a newline: "::error" at the start of a line of output is a GitHub workflow command
        name(b"b-evil\n::error title=pwn::owned.log", "b-evil\\x0a::error title=pwn::owned.log"):
            "RuntimeError: CUDA error: an illegal memory access was encountered " + line_bits + "\n",
        name(os.fsencode("c-" + _pieces(NAME_PIECES, False) + ".log"), "c-" + name_bits + ".log"):
            f"Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            f"ValueError: bad value {line_bits} {MARKUP}\n",
        # a gap that names the file: NVML JSON of the wrong shape
        name(os.fsencode("nvml-" + _pieces(NAME_PIECES, False) + ".json"), "nvml-" + name_bits + ".json"): "[1, 2]",
    }
    for file_name, text in files.items():
        with open(os.path.join(os.fsencode(logs), file_name), "wb") as handle:  # bytes: the name as the OS holds it
            handle.write(text.encode("utf-8"))
    # A binary file: the note that skips it names it (and its @mention) in the report.
    (logs / "e-@octocat.dat").write_bytes(b"\x00\x01\x02\x03" * 64)


def _normalise(text: str, root: Path) -> str:
    """What differs between two runs of the same report: the folder, durations and clock times."""
    text = text.replace(str(root), "ROOT").replace(Path(root).as_uri(), "ROOT-URI")
    # The twin's escapes are longer than the bytes they stand for: byte counts differ, nothing else.
    text = re.sub(r'"(seconds|collect_seconds|duration_s|bytes_scanned)": [0-9.e-]+', r'"\1": 0', text)
    text = re.sub(r'time="[0-9.]+"', 'time="0"', text)
    text = re.sub(r"in [0-9.]+ s\b", "in 0 s", text)
    text = re.sub(r'"(startTimeUtc|endTimeUtc|timestamp)": "[^"]*"', r'"\1": "T"', text)
    # The HTML timeline places marks by the files' write times, which differ between the folders.
    text = re.sub(r'\b(x|y|x1|x2|y1|y2|cx|cy|width|height|data-time)="[0-9.]+"', r'\1="0"', text)
    text = re.sub(r'<path d="[^"]*"', '<path d="0"', text)
    return re.sub(r'timestamp="[^"]*"', 'timestamp="T"', text)


RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _run(folder: Path, fmt: str) -> tuple[str, str, str]:
    summary = folder / "summary.md"
    env = {"PYTHONIOENCODING": "utf-8", "GITHUB_STEP_SUMMARY": str(summary)}  # strict UTF-8, as on a UTF-8 terminal
    result = run_cli(["scan", "logs", "--format", fmt, "--fail-on", "never"], cwd=folder, env=env)
    assert result.returncode == 0, result.stderr
    extra = summary.read_text(encoding="utf-8") if summary.exists() else ""
    if summary.exists():
        summary.unlink()
    return result.stdout, result.stderr, extra


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    hostile, twin = tmp_path_factory.mktemp("hostile"), tmp_path_factory.mktemp("twin")
    _write(hostile, twin=False)
    _write(twin, twin=True)
    return hostile, twin


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_prints_the_hostile_input_as_its_sanitised_twin(folders: tuple[Path, Path], fmt: str) -> None:
    hostile, twin = folders
    outputs = []
    for folder in (hostile, twin):
        stdout, stderr, summary = _run(folder, fmt)
        for name, text in (("stdout", stdout), ("stderr", stderr), ("summary", summary)):
            raw = RAW.search(text)
            assert raw is None, f"{fmt} {name} holds {raw.group()!r}: ...{text[max(0, raw.start() - 60):raw.end() + 20]!r}"
        outputs.append(tuple(_normalise(text, folder) for text in (stdout, stderr, summary)))
    assert outputs[0] == outputs[1]
    stdout = outputs[0][0] + outputs[0][2]  # GitHub's job summary carries what the annotations leave out
    # The pieces really reached the report, as their escapes (JSON doubles the backslash, SARIF's
    # uri percent-encodes it, GitHub's properties escape ":", so look for what follows it).
    for shown in ("x1bc", "x9b2J", "u202e", "xff", "x0a", "pwned"):
        assert shown in stdout, (fmt, shown)


def test_no_line_of_output_starts_a_workflow_command_but_ours(folders: tuple[Path, Path]) -> None:
    hostile, _twin = folders
    for fmt in FORMATS:
        stdout, stderr, _summary = _run(hostile, fmt)
        for line in (stdout + stderr).splitlines():
            if line.startswith("::"):
                assert fmt == "github" and re.match(r"::(error|warning|notice) file=logs/", line), line


def test_markdown_mentions_notify_no_one(folders: tuple[Path, Path]) -> None:
    stdout, _stderr, _summary = _run(folders[0], "markdown")
    assert "@\u200boctocat" in stdout  # the note naming e-@octocat.dat, the unrecognised error's text
    outside_code = re.sub(r"(`+)[^`]*?\1", "", re.sub(r"(?ms)^(`{3,})text\n.*?^\1$", "", stdout))
    assert "@octocat" not in outside_code
    assert "<b>" not in outside_code  # HTML in log text is escaped


def test_error_lines_on_stderr_stay_one_line(tmp_path: Path) -> None:
    result = run_cli(["scan", "no\n::error title=x::such\x1b]0;t\x07.log"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "diagnose: error: no\\x0a::error title=x::such\\x1b]0;t\\x07.log: no such file or directory\n"


def test_rich_terminal_shows_markup_as_text_and_only_its_own_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal (rich), `[rank0]:` and `[bold red]` are log text, not markup; the only escape
    sequences are rich's own colours."""
    monkeypatch.setenv("COLUMNS", "4000")  # one line per paragraph: the text is compared whole
    from diagnose.engine.findings import Cause, Diagnosis
    from diagnose.evidence.model import Evidence, EvidenceItem, RunInfo
    from diagnose.report.render import Format, render

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    hostile = "x" + _pieces(LINE_PIECES, False) + _pieces(NAME_PIECES, False) + " " + MARKUP
    cause = Cause("t.x", "title " + hostile, "t", "root", "error", 0.9, 1.0,
                  (EvidenceItem("\udcff" + hostile, hostile, 1),), "explained " + hostile, ("fix " + hostile,), ())
    diagnosis = Diagnosis(Evidence(RunInfo(id="r", mode="scan", inputs=("\udcff.log",))), [cause], [], [])
    out = Tty()
    render(Format.TERMINAL, diagnosis, out)
    text = out.getvalue()
    without_colours = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert RAW.search(without_colours.replace("\n", " ")) is None, repr(without_colours)
    unwrapped = without_colours.replace("\n", "")
    assert "[rank0]: [bold red]boom[/bold red] [link=x]y[/link]" in unwrapped
    assert visible(hostile) in unwrapped


def test_visible_is_what_the_escape_says() -> None:
    assert visible("a\x1b[31mb") == "a\\x1b[31mb"
    assert visible("\udcff.log") == "\\xff.log" == b"\xff.log".decode("utf-8", "backslashreplace")
    assert visible("tab\tstays") == "tab\tstays"
    assert visible("é ü 中文 emoji 🙂") == "é ü 中文 emoji 🙂"
    assert visible("\u202e\u2066\x9b\x85") == "\\u202e\\u2066\\x9b\\x85"
