"""The keys of a rule's test case, and the older spellings that still read.

A test case names its evidence by the condition keys (`log`, `dmesg`, `package`, `tmux`,
`file`, `checkpoint`, `gpu`, `exit`, `process`), each holding what that condition reads in the
facts' JSON form (evidence/facts.py; docs/rules.md, "Evidence schema"), plus `captures` and
`note`. Test cases once spoke a vocabulary of their own: plural keys, a tmux case's
`expected_session`, a checkpoint's `newest_age`. Rule files written so still load and test the
same; `rules lint` names the spelling to use instead (DL204).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CASE_KEYS = ("log", "dmesg", "slurm", "package", "tmux", "file", "checkpoint", "gpu", "exit", "process", "metric", "captures",
             "note")
OLD_KEYS = {"packages": "package", "files": "file", "exits": "exit", "metrics": "metric"}
# Inside a fact: (condition key, old key) -> new key.
_OLD_FIELDS = {("tmux", "expected_session"): "session", ("gpu.gpus[]", "utilization_pct"): "utilization",
               ("gpu.gpus[]", "throttle_reasons"): "throttle"}
# The clock an old checkpoint case's newest_age counted back from.
OLD_CHECKPOINT_NOW = 1_000_000_000.0


def old_spellings(case: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(old, new) for every older spelling the case uses, e.g. ("files", "file")."""
    found = [(old, new) for old, new in OLD_KEYS.items() if old in case]
    tmux = case.get("tmux")
    if isinstance(tmux, Mapping) and "expected_session" in tmux:
        found.append(("tmux.expected_session", "tmux.session"))
    checkpoint = case.get("checkpoint")
    if isinstance(checkpoint, Mapping) and ("newest_age" in checkpoint or isinstance(checkpoint.get("newest"), str)):
        found.append(("checkpoint.newest_age", "checkpoint.collected_at with newest: {path, size, mtime}"))
    gpu = case.get("gpu")
    gpus = gpu.get("gpus") if isinstance(gpu, Mapping) else None
    for item in gpus if isinstance(gpus, list) else ():
        for (where, old), new in _OLD_FIELDS.items():
            if where == "gpu.gpus[]" and isinstance(item, Mapping) and old in item:
                found.append((f"gpu.gpus[].{old}", f"gpu.gpus[].{new}"))
    return list(dict.fromkeys(found))


def modernise(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case in today's spelling (a copy; the rule's own case is left as written)."""
    out = {OLD_KEYS.get(key, key): value for key, value in case.items()}
    tmux = out.get("tmux")
    if isinstance(tmux, Mapping) and "expected_session" in tmux:
        out["tmux"] = {("session" if k == "expected_session" else k): v for k, v in tmux.items()}
    checkpoint = out.get("checkpoint")
    if isinstance(checkpoint, Mapping) and ("newest_age" in checkpoint or isinstance(checkpoint.get("newest"), str)):
        fixed = {k: v for k, v in checkpoint.items() if k not in ("newest_age", "newest")}
        age = checkpoint.get("newest_age")
        if isinstance(age, (int, float)) and not isinstance(age, bool):
            name = checkpoint.get("newest") if isinstance(checkpoint.get("newest"), str) else "ckpt.pt"
            fixed["collected_at"] = OLD_CHECKPOINT_NOW
            fixed["newest"] = {"path": name, "size": 1, "mtime": OLD_CHECKPOINT_NOW - float(age)}
        out["checkpoint"] = fixed
    gpu = out.get("gpu")
    if isinstance(gpu, Mapping) and isinstance(gpu.get("gpus"), list):
        renamed = {old: new for (where, old), new in _OLD_FIELDS.items() if where == "gpu.gpus[]"}
        out["gpu"] = {**gpu, "gpus": [{renamed.get(k, k): v for k, v in item.items()} if isinstance(item, Mapping) else item
                                      for item in gpu["gpus"]]}
    return out
