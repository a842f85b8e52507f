"""Fuzz targets for every parser of captured output, seeded with real samples.

Each target takes one mutated input and feeds it to its parser(s); the only exception a parser
may raise is ParseError (which the callers turn into a Gap). tests/evidence/test_fuzz_parsers.py runs each
target ~150 times in CI; bench/fuzz_parsers.py runs them as long as asked and prints how many
inputs each saw.

Mutations of a real sample: truncation, character flips (control characters, bidi marks, digits
of other scripts included), inserted lines from a pool of hostile tokens, deleted and duplicated
lines, digit runs swapped for huge or odd numbers; for JSON, a value anywhere in the document
replaced by one of another type.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from diagnose.errors import ParseError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "samples"
FIXTURES = REPO / "fixtures"


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _lines_of(paths: list[Path], per_file: int = 400) -> list[str]:
    out: list[str] = []
    for path in paths:
        out.extend(_read(path).splitlines()[:per_file])
    return [line for line in out if line.strip()]


# Tokens that have broken parsers before or stress their assumptions: numbers int() refuses,
# signs doubled, digits of other scripts, markup the parsers switch on, escape sequences.
HOSTILE = [
    "--1", "-", "²", "٣", "9" * 5000, "-" + "9" * 30, "1e999", "NaN", "inf", "0x", "0xZZ", "N/A", "[N/A]",
    "\x00", "\x1b[31m", "\x1bc", "\x1b]0;title\x07", "\x9b", "\u202e", "\ud800", "\udcff", "\r", "\t\t\t",
    "<!ENTITY x \"y\">", "<gpu>", "</gpu>", "]]>", "<![CDATA[", "<nvidia_smi_log>", "&amp;", "&bogus;",
    "NVSMI LOG", "GPU 00000000:00:06.0", "    Processes", "Processes:", "|   0  NVIDIA H200   On  | 0:0 Off |  ²  |",
    "index, name", "a,b,\"c", "\"" * 3, "[" * 3000, "{" * 3000, "# packages in environment at /opt/conda:",
    "Package    Version", "---------- -------", "Collecting environment information...",
    "Versions of relevant libraries:", "[pip3] torch==", "torch==", "x @ file:///", "Failures:",
    "Root Cause (first observed failure):", "[0]:", "  exitcode  : --1 (pid: x)", "  rank      : -1 (local_rank: ²)",
    "  traceback : Traceback (most recent call last):", "=" * 60, "-" * 60, "[rank99999999999999999999]:",
    "[  99999999999999999999999999.5] x", "2026-13-45T99:99:99+99:99", "99/99/9999 99:99:99", "E1399 99:99:99.999",
    "Feb 30 25:61:61 host kernel:", "[Sun Feb 30 25:61:61 99999] x",
]

_CHARS = st.one_of(
    st.sampled_from(["\x00", "\x1b", "\n", "\r", "\t", ":", ",", "<", ">", "/", "\"", "=", "|", "[", "]", "-", "0", "9"]),
    st.characters(),
)


@st.composite
def mutated_text(draw: st.DrawFn, seeds: list[str]) -> str:
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "duplicate", "number", "hostile"]))
        size = len(text)
        if kind == "truncate":
            text = text[: draw(st.integers(0, size))]
        elif kind == "flip" and size:
            at = draw(st.integers(0, size - 1))
            text = text[:at] + draw(_CHARS) + text[at + 1:]
        elif kind in ("insert", "hostile"):
            lines = text.split("\n")
            at = draw(st.integers(0, len(lines)))
            new = draw(st.sampled_from(HOSTILE)) if kind == "hostile" else draw(st.text(_CHARS, max_size=40))
            lines.insert(at, new)
            text = "\n".join(lines)
        elif kind == "delete" and size:
            start = draw(st.integers(0, size - 1))
            text = text[:start] + text[start + draw(st.integers(1, 200)):]
        elif kind == "duplicate":
            lines = text.split("\n")
            at = draw(st.integers(0, len(lines) - 1))
            lines.insert(at, lines[at])
            text = "\n".join(lines)
        elif kind == "number":
            import re

            runs = [m.span() for m in re.finditer(r"\d+", text)]
            if runs:
                start, end = draw(st.sampled_from(runs))
                text = text[:start] + draw(st.sampled_from(["--1", "-1", "9" * 5000, "²", "٣", "", "0" * 40, "1.5.6"])) + text[end:]
        else:  # a token pasted mid-line
            at = draw(st.integers(0, size))
            text = text[:at] + draw(st.sampled_from(HOSTILE)) + text[at:]
    return text


_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30, max_value=10**400),
              st.floats(allow_nan=True, allow_infinity=True), st.text(_CHARS, max_size=20), st.sampled_from(HOSTILE)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*here, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_paths(item, (*here, index)))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


@st.composite
def mutated_json(draw: st.DrawFn, seeds: list[Any]) -> Any:
    """A real JSON document with 1-3 values (anywhere, the root included) of another type."""
    data = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(data)))
        data = _replace(data, path, draw(_JSON_VALUES))
    return data


@dataclass
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    run: Callable[[Any], object]


def _allow_parse_error(func: Callable[[Any], object]) -> Callable[[Any], object]:
    def run(value: Any) -> object:
        try:
            return func(value)
        except ParseError as exc:  # the documented way out: it becomes a gap naming the source
            assert str(exc), "a ParseError says what broke"
            return exc
    return run


# ---------------------------------------------------------------- the targets


def _gpu_targets() -> list[Target]:
    from diagnose.evidence.parsers.gpu import (
        parse_csv,
        parse_gpu_text,
        parse_nvml_json,
        parse_nvml_text,
        parse_query_text,
        parse_table,
        parse_xml,
    )

    h200, older = SAMPLES / "h200", SAMPLES / "older"
    tables = [_read(h200 / "nvidia-smi.txt"), _read(h200 / "nvidia-smi-busy.txt")]
    queries = [_read(h200 / "nvidia-smi-q.txt"), _read(older / "nvidia-smi-q-369.30-titanz.txt"),
               _read(older / "nvidia-smi-q-d-page-retirement-535.86.10.txt")]
    xmls = [_read(h200 / "nvidia-smi-q.xml"), _read(older / "nvidia-smi-q-x-375.66-p100.xml")]
    csvs = [_read(h200 / "nvidia-smi-query.csv")]
    nvml_texts = [_read(h200 / "nvml.json"), _read(h200 / "nvml-busy.json")]
    nvml_docs = [json.loads(text) for text in nvml_texts]

    def both(specific: Callable[[str, str], object]) -> Callable[[Any], object]:
        def run(text: Any) -> object:
            # The format's own parser, and the dispatcher that picks one by the text's shape.
            _allow_parse_error(lambda t: specific(t, "fuzz"))(text)
            return _allow_parse_error(lambda t: parse_gpu_text(t, "fuzz"))(text)
        return run

    return [
        Target("nvidia-smi table", mutated_text(tables), both(parse_table)),
        Target("nvidia-smi -q", mutated_text(queries), both(parse_query_text)),
        Target("nvidia-smi -q -x (XML)", mutated_text(xmls), both(parse_xml)),
        Target("nvidia-smi --query-gpu CSV", mutated_text(csvs), both(parse_csv)),
        Target("NVML JSON text", mutated_text(nvml_texts), _allow_parse_error(lambda t: parse_nvml_text(t, "fuzz"))),
        Target("NVML JSON wrong types", mutated_json(nvml_docs), _allow_parse_error(lambda d: parse_nvml_json(d, "fuzz"))),
    ]


def _tmux_targets() -> list[Target]:
    from diagnose.evidence.parsers.tmux import parse_tmux

    sessions = _read(SAMPLES / "tmux" / "list-sessions.txt")
    panes = _read(SAMPLES / "tmux" / "list-panes.txt")
    dead = json.loads((FIXTURES / "seed-flex7-tmux-died" / "manifest.json").read_text())["tmux"]
    live = {"socket": "/tmp/tmux-0/default", "socket_exists": True, "expected_session": "train",
            "list_sessions": {"rc": 0, "stdout": sessions, "stderr": ""},
            "list_panes": {"rc": 0, "stdout": panes, "stderr": ""}}

    @st.composite
    def capture(draw: st.DrawFn) -> Any:
        base = dict(draw(st.sampled_from([live, dead])))
        base["list_sessions"] = {**base["list_sessions"], "stdout": draw(mutated_text([sessions])),
                                 "stderr": draw(mutated_text([base["list_sessions"]["stderr"] or "no sessions"]))}
        base["list_panes"] = {**base["list_panes"], "stdout": draw(mutated_text([panes]))}
        if draw(st.booleans()):
            return draw(mutated_json([base]))
        return base

    def run(value: Any) -> object:
        expected = value.get("expected_session") if isinstance(value, dict) else None
        return parse_tmux(value, expected)

    return [Target("tmux ls / list-panes", capture(), run)]


def _package_targets() -> list[Target]:
    from diagnose.evidence.parsers.packages import looks_like_packages, parse_packages

    seeds = [_read(SAMPLES / "h200" / "pip-freeze.txt"), _read(SAMPLES / "h200" / "collect_env.txt"),
             *(_read(p) for p in sorted(FIXTURES.glob("*/env/pip-list.txt"))[:2]),
             json.dumps([{"name": "torch", "version": "2.11.0"}, {"name": "numpy", "version": "2.1.0"}])]

    def run(text: Any) -> object:
        looks_like_packages(text)
        return parse_packages(text, "fuzz")

    return [Target("pip freeze / pip list / conda list / collect_env", mutated_text(seeds), run)]


def _elastic_targets() -> list[Target]:
    from diagnose.evidence.parsers.elastic import parse_elastic_error, parse_failure_summary

    files = sorted(FIXTURES.glob("*/logs/**/error.json"))[:4]
    texts = [_read(p) for p in files]
    docs = [json.loads(t) for t in texts]
    logs = [p for p in sorted(FIXTURES.glob("*/logs/*.log")) if "ChildFailedError" in _read(p) or " FAILED" in _read(p)][:3]
    summaries = []
    for path in logs:
        lines = _read(path).splitlines()
        start = next((i for i, line in enumerate(lines) if "FAILED" in line or "ChildFailedError" in line), 0)
        summaries.append("\n".join(lines[max(0, start - 2): start + 60]))

    def summary(text: Any) -> object:
        return parse_failure_summary(list(enumerate(text.splitlines(), 1)))

    return [
        Target("torchelastic error.json", st.one_of(mutated_text(texts), mutated_json(docs).map(json.dumps)),
               lambda t: parse_elastic_error(t, "fuzz", 0)),
        Target("torchelastic failure summary", mutated_text(summaries), summary),
    ]


def _dmesg_targets() -> list[Target]:
    from diagnose.evidence.lines import dmesg_seconds, kernel_time
    from diagnose.live.collectors.dmesg import _window_clock, _window_dmesg

    seeds = [_read(SAMPLES / "h200" / "dmesg-nvrm-tail.txt"),
             *(_read(p) for p in sorted(FIXTURES.glob("*/kernel/*"))[:3] if p.is_file())]

    def run(text: Any) -> object:
        data = text.encode("utf-8", errors="surrogatepass")
        _window_dmesg(data, 1_700_000_000.0, 1_700_000_100.0, 1_800_000_000.0)
        _window_clock(data, 1_700_000_100.0, 1_800_000_000.0, 2026)
        for line in text.splitlines()[:200]:
            dmesg_seconds(line)
            kernel_time(line, 1_700_000_000.0, 2026)
        return None

    return [Target("dmesg lines", mutated_text(seeds), run)]


def _lineinfo_targets() -> list[Target]:
    from diagnose.evidence.lines import kernel_time, log_time, rank_of, strip_ansi

    paths = sorted((REPO / "tests" / "data" / "logs").glob("*.log")) + sorted(FIXTURES.glob("*/logs/*.log"))[:8]
    lines = _lines_of(paths, 200)

    def run(text: Any) -> object:
        for line in text.splitlines() or [text]:
            strip_ansi(line.encode("utf-8", errors="surrogatepass"))
            rank_of(line)
            log_time(line, 2026)
            kernel_time(line, None, 2026)
        return None

    # A few real lines joined, then mutated: one input exercises several line shapes.
    chunks = ["\n".join(lines[i: i + 5]) for i in range(0, len(lines), 5)]
    return [Target("log lines (lineinfo)", mutated_text(chunks), run)]


def _sniff_targets() -> list[Target]:
    from diagnose.evidence.sniff import kind_from_content, rank_from_path, sniff

    seeds = [_read(p)[:20000] for p in sorted((SAMPLES / "h200").iterdir())]
    names = ["train.log", "nvidia-smi.txt", "nvml.json", "dmesg.txt", "requirements.txt", "rank3.log",
             "attempt_0/3/error.json", "x.gz", "rank" + "9" * 5000 + ".log"]

    @st.composite
    def sample(draw: st.DrawFn) -> tuple[str, str]:
        return draw(st.sampled_from(names)), draw(mutated_text(seeds))

    def run(value: Any) -> object:
        name, text = value
        kind_from_content(text)
        rank_from_path(Path(name))
        return sniff(Path(name), text.encode("utf-8", errors="surrogatepass")[:65536])

    return [Target("sniff", sample(), run)]


def targets() -> list[Target]:
    return [*_gpu_targets(), *_tmux_targets(), *_package_targets(), *_elastic_targets(), *_dmesg_targets(),
            *_lineinfo_targets(), *_sniff_targets()]
