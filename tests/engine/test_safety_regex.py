"""Hostile long lines: every regex fixed for quadratic backtracking, timed on a 400 KB line
in a subprocess with a timeout (before the fixes these took from tens of seconds to hours).
The bound (5 s) is generous: the fixed code takes well under a second."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIZE = 400_000
BOUND = 5.0

CASES = {
    # tracebacks._FATAL: `.*double free detected.*` inside a search
    "fatal-line": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'hf_'"),
    "fatal-spaces": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'a '"),
    # redact: assignment names, sk- tokens, URL schemes, login( ("token " opens redact's gate)
    "redact-underscores": ("from diagnose.report.redact import redact as f", "'_'", "'token '"),
    "redact-key-names": ("from diagnose.report.redact import redact as f", "'KEY_'"),
    "redact-sk": ("from diagnose.report.redact import redact as f", "'sk-'"),
    "redact-scheme": ("from diagnose.report.redact import redact as f", "'a.'", "'token '"),
    "redact-login": ("from diagnose.report.redact import redact as f", "'login('", "'token '"),
    # sarif fingerprint: a leading '[' and a long digit run
    "sarif-bracket-digits": ("from diagnose.report.sarif import normalise as f", "'1'", "'['"),
    # launcher prefixes (lines.split_prefix): host names, task ids, stamps, nested prefixes
    "prefix-host-chars": ("from diagnose.evidence.lines import split_prefix as f", "'a1.'"),
    "prefix-digits": ("from diagnose.evidence.lines import split_prefix as f", "'1'"),
    "prefix-nested": ("from diagnose.evidence.lines import split_prefix as f", "'[rank1]:'"),
    "prefix-stamps": ("from diagnose.evidence.lines import split_prefix as f", "'Dec 01 20:44:22 '"),
    # progress and finishing words (lines.progress_of, is_finish_line)
    "progress-counts": ("from diagnose.evidence.lines import progress_of as f", "'1/'"),
    "progress-steps": ("from diagnose.evidence.lines import progress_of as f", "'step '"),
    "finish-words": ("from diagnose.evidence.lines import is_finish_line as f", "'training '"),
    # the error shapes (tracebacks): a Rust panic's old quoted message, thread headers, IPython
    # headers and frames, glog, a frame path, a bare exception name, a message that goes on
    "shape-rust-quotes": ("from diagnose.engine.tracebacks import crashes_in_text as f", "\"', \"", "\"thread 'x' panicked at '\""),
    "shape-thread-header": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'a: '", "'Exception in thread '"),
    "shape-ipython-header": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'a  '", "'KeyError'"),
    "shape-ipython-frame": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'/a.py'",
                            "'KeyError    Traceback (most recent call last)\\nFile '"),
    "shape-glog": ("from diagnose.engine.tracebacks import crashes_in_text as f", "' 1'", "'F1130 03:45:51.123'"),
    "shape-frame-path": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'a'",
                         "'Traceback (most recent call last):\\n  File \"'"),
    "shape-exception-name": ("from diagnose.engine.tracebacks import crashes_in_text as f", "'a.'", "'A'"),
    "shape-caught-in": ("from diagnose.engine.tracebacks import crashes_in_text as f", "' in '",
                        "'Traceback (most recent call last):\\nKeyError: Caught KeyError'"),
    # cuda device assertion site
    "cuda-assert-site": ("from diagnose.engine.analyzers.cuda import _ASSERT; f = _ASSERT.search", "'_'"),
    # nvidia-smi CSV header unit
    # (a header over csv's field limit is a ParseError, which becomes a gap: refused in linear time too)
    "gpu-csv-header": ("from diagnose.evidence.parsers.gpu import _unit_cut, parse_csv; from diagnose.errors import ParseError; "
                       "exec('def f(t):\\n    _unit_cut(t + \\' ]\\')\\n    try:\\n        parse_csv(\\'index,\\' + t, \\'x\\')\\n"
                       "    except ParseError:\\n        pass')",
                       "'['"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_line_is_linear(name: str) -> None:
    setup, unit, *prefix = CASES[name]
    code = textwrap.dedent(f"""
        import time
        {setup}
        unit = {unit}
        line = {prefix[0] if prefix else "''"} + (unit * ({SIZE} // len(unit) + 1))[:{SIZE}]
        started = time.perf_counter()
        f(line)
        print(time.perf_counter() - started)
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still running after 30 s on a {SIZE} character line")
    assert done.returncode == 0, done.stderr
    seconds = float(done.stdout.strip().splitlines()[-1])
    assert seconds < BOUND, f"{name}: {seconds:.1f} s on a {SIZE} character line"


def test_fatal_message_keeps_its_meaning() -> None:
    from diagnose.engine.tracebacks import fatal_message

    assert fatal_message("free(): double free detected in tcache 2") == "free(): double free detected in tcache 2"
    assert fatal_message("Fatal Python error: Aborted double free detected") == "Fatal Python error: Aborted double free detected"
    assert fatal_message("x Segmentation fault (core dumped)") == "Segmentation fault (core dumped)"
    assert fatal_message("bash: line 1: 42 Killed python train.py") == " Killed python train.py"
    assert fatal_message("all good") is None


def test_redaction_still_masks() -> None:
    from diagnose.evidence.redact import redact

    assert redact("export MY_API_KEY=abcdef123456") == "export MY_API_KEY=***"
    assert redact("x_API_KEY: 's3cretvalue1'") == "x_API_KEY: '***'"
    assert redact("key sk-abcdefghijklmnopqrstu1vw here") == "key sk-*** here"
    assert redact("sk-abcdefghijklmnopqrstuvwxyz") == "sk-abcdefghijklmnopqrstuvwxyz"  # no digit: a word
    assert redact("https://user:hunter2@example.com/x") == "https://user:***@example.com/x"
    assert redact("wandb.login(key='abcdef0123456789')") == "wandb.login(key='***')"


def test_cuda_assert_site_unchanged() -> None:
    from diagnose.engine.analyzers.cuda import _ASSERT

    line = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [3,0,0], "
            "thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.")
    match = _ASSERT.search("prefix " + line)
    assert match is not None and match.group("site") == "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1141"
