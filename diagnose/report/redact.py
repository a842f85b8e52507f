"""Secrets masked in every string of a Diagnosis before any reporter sees it:
diagnose.report.render.reporter() wraps every format with `redact_diagnosis`, so no format (and
no caller) can skip it. The patterns and the masking of text live in evidence/redact.py."""

from __future__ import annotations

from dataclasses import replace

from diagnose.engine.findings import Diagnosis
from diagnose.evidence.redact import MASK, Masker, redact, scrub, token_like


def redact_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """A copy of the diagnosis with secrets masked in every string it holds: cause titles,
    explanations, fixes, evidence lines, gaps, notes, run inputs, collected facts.

    Two passes: the first finds the secrets (by their shape or their NAME= context), the second
    masks them, and masks those values again wherever they stand alone. A cause's evidence lines
    go through one Masker in order, so the body lines of a PEM key shown as separate evidence
    lines are masked like the lines of one file."""
    found: set[str] = set()
    # Each string's masked text, from the first pass: the second masks the same strings again
    # (and a line shown in several places, as evidence and on the timeline, is one string).
    redacted: dict[str, str] = {}

    def collect(text: str) -> str:
        if text not in redacted:
            redacted[text] = redact(text, found)  # `found` only collects: the result is redact(text)
        return text

    scrub(diagnosis, collect)
    for cause in diagnosis.causes:
        masker = Masker(found)
        for item in cause.evidence:
            masker(item.text)
    chased = sorted((s for s in found if token_like(s)), key=len, reverse=True)

    def chase(text: str) -> str:
        for secret in chased:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def mask(text: str) -> str:
        done = redacted.get(text)
        return chase(redact(text) if done is None else done)

    causes = []
    for cause in diagnosis.causes:
        masker = Masker()
        evidence = tuple(replace(item, text=chase(masker(item.text))) for item in cause.evidence)
        causes.append(replace(cause, evidence=evidence))
    return scrub(replace(diagnosis, causes=causes), mask)
