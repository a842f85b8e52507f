"""torchrun (torchelastic): which rank failed first, and with what.

The ChildFailedError summary only reports; its "Root Cause (first observed failure)" entry
names the first worker to EXIT. For a crash that is the culprit. For a hang it is the victim:
the rank that timed out waiting exits first, while the rank that hung is still running until
torchrun tears it down with SIGTERM (listed under "Failures"). Error files (error.json) carry
each failed rank's exception and time when the summary is not in the logs.
"""

from __future__ import annotations

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.analyzers.collectives import CONSEQUENCE, last_words, ranks_text
from diagnose.engine.analyzers.runlog import RunLog, run_log
from diagnose.evidence.model import Evidence, EvidenceItem, ExitRecord
from diagnose.evidence.parsers.elastic import ElasticFailure


def _error_files(evidence: Evidence) -> list[ExitRecord]:
    return [r for r in evidence.exits or () if r.source.endswith(".json") and r.message]


def _describe_other(failure: ElasticFailure) -> str:
    text = f"rank {failure.rank}" if failure.rank is not None else "a worker"
    if failure.torn_down:
        return f"{text} (torn down with {failure.signal})"
    if failure.has_own_error:
        tail = " - a consequence" if CONSEQUENCE.search(failure.error) else ""
        return f"{text} ({_short(failure.error)}{tail})"
    return f"{text} (exit code {failure.exitcode}" + (f", {failure.signal})" if failure.signal else ")")


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _own_error_line(rank: int | None, failure_error: str, log: RunLog) -> tuple[str, int, str] | None:
    """The rank's own exception line in a worker log (source, line, text), to show beside the summary."""
    if rank is None:
        return None
    wanted = failure_error.split(":", 1)[0].rsplit(".", 1)[-1] if failure_error else ""
    for source, crash in log.crashes_of(rank):
        if crash.exc_type.rsplit(".", 1)[-1] == wanted or (not wanted and not crash.fatal):
            line_no, text = next(((no, t) for no, t in crash.lines if no == crash.line_no), crash.lines[-1])
            return source, line_no, text
    return None


def summarise(log: RunLog, evidence: Evidence) -> tuple[dict[str, str], list[EvidenceItem]]:
    host = evidence.run.host
    found = log.summary
    captures: dict[str, str] = {}
    items: list[EvidenceItem] = []
    if found is None:
        records = sorted(_error_files(evidence), key=lambda r: (r.time is None, r.time or 0.0))
        if not records:
            captures["elastic_summary"] = (
                "The summary's \"Root Cause (first observed failure)\" block was not found in the logs given; read it "
                "(it follows \"Failures:\") or the per-rank error.json files for the first failed rank."
            )
            captures["root_rank"] = "?"
            return captures, items
        first = records[0]
        captures.update(root_rank="?" if first.rank is None else str(first.rank), root_error=first.message)
        order = ", ".join(f"rank {r.rank}" for r in records if r.rank is not None)
        captures["elastic_summary"] = (
            f"No summary block in the logs, but the error files say rank {captures['root_rank']} failed first "
            f"({first.message})" + (f"; in time order: {order}." if len(records) > 1 else ".")
        )
        items.append(EvidenceItem(first.source, first.message, None, first.time, first.rank, host))
        return captures, items
    source, summary = found
    root = summary.root
    if root is None:
        captures["elastic_summary"] = "The summary lists failures but no \"Root Cause\" entry."
        captures["root_rank"] = "?"
        return captures, items
    captures.update({
        "root_rank": "?" if root.rank is None else str(root.rank),
        "root_local_rank": "?" if root.local_rank is None else str(root.local_rank),
        "root_host": root.host or "?",
        "root_exitcode": "?" if root.exitcode is None else str(root.exitcode),
        "root_signal": root.signal or "",
        "root_error": root.error if root.has_own_error else "",
        "root_time": root.time or "?",
    })
    items.extend(EvidenceItem(source, text, no, None, root.rank, host) for no, text in root.lines)
    parts = [f"torchrun names {root.describe()} as the first failure (at {root.time or '?'})"]
    if root.has_own_error:
        parts[-1] += f', with its own error: "{_short(root.error, 240)}".'
        own = _own_error_line(root.rank, root.error, log)
        if own is not None:
            items.insert(0, EvidenceItem(own[0], own[2], own[1], None, root.rank, host))
    elif root.signal == "SIGKILL":
        parts[-1] += (": it printed no error of its own - SIGKILL cannot be caught. The usual sender is the kernel "
                      f"OOM killer: check dmesg (or the container's memory events) on {root.host or 'that host'} "
                      f"around {root.time or 'that time'}.")
    elif root.signal:
        parts[-1] += f": it was ended by {root.signal} without an error of its own."
    elif root.error.startswith("To enable traceback"):
        parts[-1] += (": the summary has no traceback for it (main() is not decorated with @record), so read that "
                      "rank's own output above the summary.")
    else:
        parts[-1] += "."
    others = summary.others
    if others:
        parts.append("The other failures it lists came after it: " + "; ".join(_describe_other(f) for f in others) + ".")
    hung = [f for f in others if f.torn_down and f.rank is not None]
    if root.has_own_error and CONSEQUENCE.search(root.error):
        if hung:
            ranks = [f.rank for f in hung if f.rank is not None]
            who = "rank " + ranks_text(ranks)
            line = last_words(ranks[0], log)
            said = f' (its last line: "{_short(line.body)}")' if line is not None else ""
            parts.append(
                f"This is a hang, not a crash: torchelastic's \"Root Cause\" is the first rank to EXIT, here rank "
                f"{root.rank}, which timed out waiting for the others. The rank that hung - {who}, still running until "
                f"torchrun sent it {hung[0].signal}{said} - is where to look."
            )
            captures["hung_rank"] = ranks_text(ranks)
            for failure in hung:
                items.extend(EvidenceItem(source, text, no, None, failure.rank, host) for no, text in failure.lines)
        else:
            parts.append("Its error is itself a consequence (a timeout or a lost peer): the rank that caused it is "
                         "not in this summary - look for the rank whose log stops first.")
    captures["elastic_summary"] = " ".join(parts)
    return captures, items


@register("torchelastic")
def torchelastic(inp: AnalyzerInput) -> AnalyzerOutput:
    log = run_log(inp.evidence)
    captures, items = summarise(log, inp.evidence)
    return AnalyzerOutput(captures=captures, evidence=items, lead=True)


def first_failed_rank(evidence: Evidence) -> int | None:
    """The rank torchelastic names as the first failure, if any (for other analyzers)."""
    found = run_log(evidence).summary
    if found is None or found[1].root is None:
        return None
    return found[1].root.rank

