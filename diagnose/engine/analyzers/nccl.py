"""NCCL errors: torch's wrapper names a category (system, internal, CUDA, remote); NCCL's own text -
torch's "Last error:" line and the NCCL WARN lines - says what actually failed."""

from __future__ import annotations

from diagnose.engine.analyzers.base import AnalyzerInput, AnalyzerOutput, register
from diagnose.engine.analyzers.runlog import run_log


@register("nccl_error")
def nccl_error(inp: AnalyzerInput) -> AnalyzerOutput:
    log = run_log(inp.evidence)
    out = AnalyzerOutput()
    host = inp.evidence.run.host
    parts = []
    if log.nccl_last_errors:
        last = log.nccl_last_errors[0]
        out.captures["last_error"] = last.body[:300]
        parts.append(f'NCCL\'s last error: "{last.body[:300]}".')
        out.evidence.append(last.item(host))
    if log.nccl_warnings:
        warn = log.nccl_warnings[0]
        text = warn.text.split("NCCL WARN", 1)[-1].strip()
        out.captures["nccl_warn"] = text[:300]
        parts.append(f'The first NCCL WARN line: "{text[:300]}"' + (f" (rank {warn.rank})." if warn.rank is not None else "."))
        out.evidence.append(warn.item(host))
    out.captures["nccl_detail"] = " ".join(parts) if parts else (
        "NCCL's own explanation is not in the log: rerun with NCCL_DEBUG=WARN (or INFO) to get its WARN lines."
    )
    return out
