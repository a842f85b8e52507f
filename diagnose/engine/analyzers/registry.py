"""Reasoning that a regex cannot do, attached to a rule with `analyze: <name>`.

An analyzer looks at a matched rule's hits (and any other evidence) and returns extra
captures and evidence, e.g. which rank was behind when an NCCL watchdog fired.

- torchelastic: the ChildFailedError summary and error files -> the first failed rank and its error.
- collective_timeout / hung_rank: NCCL watchdog / flight-recorder and gloo timeout lines of every
  rank -> the rank that was behind (or never reached the collective).
- cuda_async: a CUDA error raised at a later API call -> the first real device error (kernel
  assertion, Xid) in the timeline.
- xid: the NVIDIA Xid table (what a number means, application or hardware).
- nccl_error: NCCL's own words behind a torch NCCL error ("Last error:", NCCL WARN lines).
- crash_site: the innermost frame of the traceback around the rule's line -> raised inside an
  installed package's own code (its bug), else the rule is discarded.
- sigkill: a SIGKILL without an OOM record -> killed from outside when a kernel log covers the
  moment and holds no OOM kill of the run's, else probably out of memory.
"""

from __future__ import annotations

from importlib import import_module

from diagnose.engine.analyzers.base import ANALYZERS, Analyzer, AnalyzerInput, AnalyzerOutput, register

# Importing the modules registers their analyzers.
for _module in ("collectives", "crashsite", "cuda", "nccl", "signals", "torchelastic"):
    import_module(f"diagnose.engine.analyzers.{_module}")

__all__ = ["ANALYZERS", "Analyzer", "AnalyzerInput", "AnalyzerOutput", "register"]
