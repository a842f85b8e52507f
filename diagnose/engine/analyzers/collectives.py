"""Collective timeouts across ranks: which rank was behind.

When one rank stops taking part (hung, slow, dead), every other rank waits in the next collective
until its timeout fires. The rank whose watchdog fired is a victim; the one to look at is the rank
that never issued that collective. From every rank's lines:

1. progress: NCCL's "last enqueued ... work: E, last completed ... work: C" (printed by a rank
   that timed out, and from torch 2.6 on by the others too when the flight recorder is asked to
   dump). The rank with the lowest last-enqueued number is behind.
2. absence: ranks that printed lines but no timeout at all, while others timed out.
3. sequence: ranks timing out at different SeqNums of one group - the lowest is behind.
Same SeqNum with different OpType/sizes means the ranks called different collectives (a mismatch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.analyzers.runlog import CollectiveRecord, LogLine, RunLog, run_log
from diagnose.evidence.model import Evidence, EvidenceItem

# Errors that are the effect of another rank's failure, not a failure of their own.
CONSEQUENCE = re.compile(
    r"Watchdog caught collective operation timeout|timed out in blocking wait|Timed out waiting \d+ms for (?:recv|send)"
    r"|Connection closed by (?:remote )?peer|Connection reset by peer|NCCL communicator was aborted"
    r"|Some NCCL operations have failed or timed out|SignalException|got signal: \d+|Signal \d+ \(SIG(?:TERM|INT|HUP)\)"
    r"|ncclRemoteError|remote process exited|Socket Timeout|Broken pipe|ChildFailedError"
)
TEARDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
OWN_KILL_SIGNALS = {9: "SIGKILL", 6: "SIGABRT", 7: "SIGBUS", 11: "SIGSEGV", 4: "SIGILL", 8: "SIGFPE"}


def ranks_text(ranks: list[int] | set[int]) -> str:
    items = sorted(ranks)
    if len(items) > 8:
        return ", ".join(map(str, items[:8])) + f" and {len(items) - 8} more"
    return ", ".join(map(str, items))


def _plural(ranks: list[int] | set[int]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + ranks_text(ranks)


@dataclass
class Verdict:
    timed_out: dict[int, list[CollectiveRecord]] = field(default_factory=dict)  # rank -> its own timeout lines
    progress: dict[int, CollectiveRecord] = field(default_factory=dict)  # rank -> its last progress line
    lagging: list[int] = field(default_factory=list)
    basis: str = ""  # progress | absent | seq | "" (none found)
    detail: str = ""
    first: CollectiveRecord | None = None  # the timeout that names the collective
    mismatch: str = ""

    @property
    def op(self) -> str:
        return (self.first.op if self.first and self.first.op else "") or "?"

    @property
    def seq(self) -> str:
        if self.first is None or self.first.seq is None:
            return "?"
        return str(self.first.seq)


def _what(first: CollectiveRecord | None) -> str:
    if first is None:
        return "a collective"
    if first.kind == "gloo":
        return f"a gloo {first.op} ({first.timeout_ms} ms timeout)"
    name = first.op or "a collective"
    return f"{name} with SeqNum {first.seq}" if first.seq is not None else name


def analyse(log: RunLog) -> Verdict:
    verdict = Verdict()
    for record in log.collectives:
        if record.rank is None:
            continue
        if record.timed_out:
            verdict.timed_out.setdefault(record.rank, []).append(record)
        if record.enqueued is not None:
            verdict.progress[record.rank] = record  # the last one printed wins
    named = [r for r in log.collectives if r.kind in ("watchdog", "blocking", "gloo")]
    verdict.first = min(named, key=_order) if named else next((r for r in log.collectives if r.timed_out), None)
    if not verdict.timed_out:
        verdict.detail = "No rank's own timeout line was found."
        return verdict
    what = _what(verdict.first)
    timed = sorted(verdict.timed_out)
    progress = _same_group(verdict)
    if len(progress) >= 2:
        enqueued = {rank: rec.enqueued for rank, rec in progress.items() if rec.enqueued is not None}
        low, high = min(enqueued.values()), max(enqueued.values())
        if low < high:
            behind = sorted(r for r, e in enqueued.items() if e == low)
            ahead = sorted(r for r, e in enqueued.items() if e == high)
            verdict.lagging, verdict.basis = behind, "progress"
            verdict.detail = (
                f"{_plural(behind).capitalize()} had issued collectives only up to number {low}, while "
                f"{_plural(ahead)} had issued up to {high}: {_plural(behind)} never called the collective the others "
                f"were waiting in ({what})."
            )
    if not verdict.lagging:
        quiet = sorted(log.ranks - set(verdict.timed_out))
        if quiet and len(log.ranks) >= 2:
            verdict.lagging, verdict.basis = quiet, "absent"
            verdict.detail = (
                f"{_plural(timed).capitalize()} timed out in {what}, but {_plural(quiet)} printed no timeout at all: "
                f"{'they' if len(quiet) > 1 else 'it'} most likely never reached that collective (hung, stuck or dead)."
            )
    verdict.mismatch = _mismatch(verdict)
    if not verdict.lagging and not verdict.mismatch:
        # SeqNums count one process group's collectives, and only say who is behind where the
        # ranks issued the same ones: not across groups, nor once they called different ones.
        seqs = _group_seqs(verdict)
        if len(set(seqs.values())) > 1:
            low = min(seqs.values())
            behind = sorted(r for r, s in seqs.items() if s == low)
            verdict.lagging, verdict.basis = behind, "seq"
            verdict.detail = (
                f"{_plural(behind).capitalize()} timed out in an earlier collective (SeqNum {low}) than the others "
                f"({', '.join(f'rank {r}: {s}' for r, s in sorted(seqs.items()) if s != low)}): {_plural(behind)} fell behind."
            )
    if not verdict.lagging:
        if len(log.ranks) <= 1:
            verdict.detail = (
                f"Only {_plural(log.ranks or set(timed))}'s output is here; the rank that never reached {what} cannot be "
                "named from it. Collect every rank's log (torchrun --tee 3 --log-dir DIR, or one file per rank)."
            )
        elif verdict.mismatch:
            verdict.detail = (f"{_plural(timed).capitalize()} timed out waiting in collectives that do not line up; "
                              "none can be called behind from their sequence numbers.")
        else:
            verdict.detail = (
                f"Every rank in these logs ({ranks_text(timed)}) timed out in the same collective ({what}); none is visibly "
                "behind, so the rank that never arrived is probably one whose log is not here (another node), or the "
                "collective itself hung (network, NCCL, a GPU fault - check dmesg for Xid lines)."
            )
    if verdict.mismatch:
        verdict.detail += " " + verdict.mismatch
    return verdict


def _order(record: CollectiveRecord) -> tuple[int, float, int]:
    moment = record.line.item().time
    return (moment is None, moment or 0.0, record.line.line_no)


def _same_group(verdict: Verdict) -> dict[int, CollectiveRecord]:
    """Progress lines of one process group (sequence numbers are per group)."""
    groups = {rec.pg for rec in verdict.progress.values() if rec.pg is not None}
    if len(groups) <= 1:
        return verdict.progress
    timed_groups = [rec.pg for rec in verdict.progress.values() if rec.timed_out and rec.pg is not None]
    wanted = timed_groups[0] if timed_groups else sorted(groups)[0]
    return {rank: rec for rank, rec in verdict.progress.items() if rec.pg in (wanted, None)}


def _group_seqs(verdict: Verdict) -> dict[int, int]:
    """Each rank's lowest timed-out SeqNum in the process group most ranks timed out in. A group
    is its PG id where the line names one, else its timeout (two groups' collectives that time
    out after different times are not one sequence)."""
    by_group: dict[str, dict[int, int]] = {}
    for rank, records in verdict.timed_out.items():
        for record in records:
            if record.seq is None:
                continue
            group = by_group.setdefault(record.pg or f"timeout {record.timeout_ms}", {})
            group[rank] = min(group.get(rank, record.seq), record.seq)
    if not by_group:
        return {}
    return max(by_group.values(), key=len)


def _mismatch(verdict: Verdict) -> str:
    by_seq: dict[int, dict[int, tuple[str | None, str | None]]] = {}
    for rank, records in verdict.timed_out.items():
        for record in records:
            if record.kind in ("watchdog", "blocking") and record.seq is not None:
                by_seq.setdefault(record.seq, {})[rank] = (record.op, record.numel)
    for seq, calls in sorted(by_seq.items()):
        if len(set(calls.values())) > 1:
            shown = "; ".join(f"rank {r}: {op}" + (f" {numel}" if numel else "") for r, (op, numel) in sorted(calls.items()))
            return (f"At SeqNum {seq} the ranks called different collectives ({shown}): the order or size of collectives "
                    "differs between ranks (a code path that only some ranks take).")
    return ""


# ---------------------------------------------------------------- what a rank did

def own_failure(rank: int, log: RunLog, evidence: Evidence, verdict: Verdict | None = None) -> str:
    """Why `rank` failed on its own (an error, or a kill that was not teardown), or ''."""
    found = log.summary
    if found is not None:
        for failure in found[1].failures:
            if failure.rank != rank:
                continue
            if failure.has_own_error and not CONSEQUENCE.search(failure.error):
                return failure.error
            if failure.signal and failure.signal not in TEARDOWN_SIGNALS and not failure.has_own_error:
                return f"killed by {failure.signal} (exit code {failure.exitcode})"
    timed = verdict is not None and rank in verdict.timed_out
    for _source, crash in log.crashes_of(rank):
        if CONSEQUENCE.search(crash.summary) or CONSEQUENCE.search(" ".join(text for _no, text in crash.lines)):
            continue
        if crash.fatal and timed:
            continue  # the abort that follows its own watchdog timeout
        return crash.summary
    for record in evidence.exits or ():
        if record.rank != rank:
            continue
        if record.signal in OWN_KILL_SIGNALS:
            return f"killed by {OWN_KILL_SIGNALS[record.signal]}"
        if record.message and not CONSEQUENCE.search(record.message):
            return record.message
    return ""


def last_words(rank: int, log: RunLog) -> LogLine | None:
    return log.last_line.get(rank)


def _evidence(verdict: Verdict, log: RunLog, host: str | None, ranks: list[int]) -> list[EvidenceItem]:
    items: list[EvidenceItem] = []
    for rank in ranks[:4]:
        record = verdict.progress.get(rank)
        if record is not None and verdict.basis == "progress":
            items.append(record.line.item(host))
        line = last_words(rank, log)
        if line is not None:
            items.append(line.item(host))
    return items


@register("collective_timeout")
def collective_timeout(inp: AnalyzerInput) -> AnalyzerOutput:
    """For a timeout symptom: name the collective and the rank that was behind."""
    log = run_log(inp.evidence)
    verdict = analyse(log)
    out = AnalyzerOutput(lead=True)
    first = verdict.first
    if first is not None:
        out.captures.update({k: v for k, v in {
            "op": first.op or "", "seq": "" if first.seq is None else str(first.seq),
            "timeout_ms": "" if first.timeout_ms is None else str(first.timeout_ms),
            "ran_ms": "" if first.ran_ms is None else str(first.ran_ms),
        }.items() if v})
    out.captures["timed_out_ranks"] = ranks_text(set(verdict.timed_out)) or "?"
    out.captures["timed_out_word"] = _plural(set(verdict.timed_out)).capitalize() if verdict.timed_out else "A rank"
    out.captures["lagging_rank"] = ranks_text(verdict.lagging) if verdict.lagging else "unknown"
    detail = verdict.detail
    if verdict.lagging:
        lines = []
        for rank in verdict.lagging[:3]:
            why = own_failure(rank, log, inp.evidence, verdict)
            line = last_words(rank, log)
            if why:
                lines.append(f"Rank {rank} failed on its own: {why} - that error is the cause to fix.")
            elif line is not None:
                lines.append(f'The last line rank {rank} printed: "{line.body[:200]}".')
        detail = " ".join([detail, *lines])
    out.captures["lag_detail"] = detail
    out.evidence = _evidence(verdict, log, inp.evidence.run.host, verdict.lagging)
    return out


@register("hung_rank")
def hung_rank(inp: AnalyzerInput) -> AnalyzerOutput:
    """For the root-cause rule: holds only when a lagging rank shows no failure of its own."""
    log = run_log(inp.evidence)
    verdict = analyse(log)
    if not verdict.lagging:
        return AnalyzerOutput(discard=True)
    if any(own_failure(rank, log, inp.evidence, verdict) for rank in verdict.lagging):
        return AnalyzerOutput(discard=True)  # its own error is the cause, and other rules name it
    out = AnalyzerOutput(lead=True)
    ranks = verdict.lagging
    out.captures["hung_rank"] = ranks_text(ranks)
    out.captures["hung_ranks_word"] = _plural(ranks)
    out.captures["collective"] = _what(verdict.first)
    out.captures["timed_out_ranks"] = ranks_text(set(verdict.timed_out))
    line = last_words(ranks[0], log)
    out.captures["hung_last_line"] = line.body[:200] if line is not None else "(nothing: its log is not here)"
    ended = ""
    found = log.summary
    if found is not None:
        for failure in found[1].failures:
            if failure.rank in ranks and failure.torn_down:
                ended = (f"torchrun ended it with {failure.signal} (exit code {failure.exitcode}) after the other rank "
                         "had failed: it was still running, not crashed.")
                out.evidence.extend(EvidenceItem(found[0], text, no, None, failure.rank, inp.evidence.run.host)
                                    for no, text in failure.lines)
                out.confidence_delta += 0.05
                break
    out.captures["hung_end"] = ended or "No failure of its own was recorded for it."
    out.captures["hang_detail"] = verdict.detail
    if verdict.basis == "progress":
        out.confidence_delta += 0.15
    out.evidence = _evidence(verdict, log, inp.evidence.run.host, ranks) + out.evidence
    if verdict.first is not None:
        out.evidence.append(verdict.first.line.item(inp.evidence.run.host))
    return out
