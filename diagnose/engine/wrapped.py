"""Messages soft-wrapped over two or three lines (issue 31).

A terminal, a web form or an issue paste breaks a long line at its width: `... Watchdog caught
collective operation timeout: ` / `WorkNCCL(SeqNum=2059, OpType=ALLGATHER, ...`, or `Loaded
runtime CuDNN l` / `ibrary: 7.4.1 but source was compiled with: 7.6.4`. A single-line pattern
then matches neither half, and the run's real error goes unnamed.

In the end of each log (where a run's error is), runs of up to three adjacent lines are joined as
they were written (the breaks taken out; a wrap keeps its trailing space, a paste that lost it is
also tried with one space), and each log pattern that found nothing in the file is looked for in
the joined text with the scan's own finder; a hit counts only where the match crosses the first
break. The hit keeps the first line's number and shows the lines joined, so the report quotes
them all.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate

from diagnose.engine.finders import MASK, SHIFT, PatternSet, make_finder
from diagnose.engine.scan import FileScan, HitSummary, LineHit, captures_of
from diagnose.evidence import logview
from diagnose.evidence.lines import prefix_of, strip_ansi
from diagnose.evidence.model import TextKind

WRAP_TAIL = 64 * 1024  # bytes of a log's end looked at
MIN_WRAPPED = 40  # a line shorter than this was not broken by a width


def add_wrapped_hits(scans: Sequence[FileScan], sets: Mapping[TextKind, PatternSet], engine: str = "auto") -> None:
    """Add to each log's scan the hits of its unmatched patterns on soft-wrapped line pairs."""
    patterns = sets.get(TextKind.LOG)
    if patterns is None or not len(patterns):
        return
    for scan in scans:
        if scan.source.kind is not TextKind.LOG or len(scan.hits) >= len(patterns):
            continue
        try:
            data, first = logview.tail(scan.source, WRAP_TAIL)
        except Exception:  # unreadable now: the scan already said what it could
            continue
        _add(scan, patterns, engine, _pairs(strip_ansi(data).decode("utf-8", errors="replace"), first))


Pair = tuple[int, str, int, bool]  # first line's number, the lines joined, the first break, a space put in
CHAIN = 3  # lines one message may be wrapped over


def _pairs(text: str, first: int) -> list[Pair]:
    """The runs of 2 to CHAIN adjacent lines that may be one line wrapped, joined."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    pairs: list[Pair] = []
    for n in range(len(lines) - 1):
        head = lines[n]
        if len(head) < MIN_WRAPPED or "\r" in head:
            continue
        for spaced in (False, True):
            joined = head
            for rest in lines[n + 1 : n + CHAIN]:
                if not rest.strip() or "\r" in rest:
                    break
                if spaced:
                    if joined[-1:].isspace() or rest[:1].isspace():
                        break
                    joined += " "
                joined += rest
                pairs.append((first + n, joined, len(head), spaced))
                if len(rest) < MIN_WRAPPED:
                    break
    return pairs


def _add(scan: FileScan, patterns: PatternSet, engine: str, pairs: list[Pair]) -> None:
    if not pairs:
        return
    encoded = [text.encode("utf-8") for _, text, _, _ in pairs]
    buf = b"\n".join(encoded)
    starts = [0, *accumulate(len(text) + 1 for text in encoded[:-1])]  # each pair's offset in buf
    _name, finder = make_finder(patterns, engine)
    done: set[tuple[int, int]] = set()
    for run in finder.find(buf, len(buf)):
        for packed in run:
            index, offset = packed & MASK, packed >> SHIFT
            if index in scan.hits:
                continue
            pair = bisect_right(starts, offset) - 1  # the pair whose text holds the offset
            if (index, pair) in done:
                continue
            done.add((index, pair))
            line_no, text, brk, spaced = pairs[pair]
            match = patterns.compiled(index).search(text)
            # It must hold text of both lines (the space put in is neither's).
            if match is None or not match.start() < brk < match.end() - spaced:
                continue
            rank = prefix_of(text).global_rank
            summary = scan.hits.setdefault(index, {}).setdefault(rank, HitSummary())
            summary.add(LineHit(line_no, text, None, rank, captures_of(match), match.span()))
