"""Package lists: pip freeze, pip list (columns or JSON), conda list, torch collect_env, and
the requirements.txt that wandb stores with each run."""

from __future__ import annotations

import json
import re

from diagnose.evidence.model import Packages, normalise_package

_FREEZE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;#]+)")
_COLUMNS = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s+(\d[^\s]*)(?:\s|$)")
_COLLECT_ENV_LIB = re.compile(r"^\[(?:pip\d?|conda)\]\s+([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==\s*|\s+)(\d[^\s]*)")
# pip freeze's direct references: "name @ file:///..." / "name @ git+https://..." (not "faulted @ 0x0...").
_DIRECT_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])? @ [a-z][a-z0-9+.-]*:\S*$")
_TORCH_VERSION = re.compile(r"^PyTorch version:\s*(\S+)", re.MULTILINE)


def looks_like_packages(text: str) -> str | None:
    """The package-list format of a text, or None."""
    head = text[:20000]
    lines = [line for line in head.splitlines() if line.strip()]
    if not lines:
        return None
    if "Collecting environment information" in head or (_TORCH_VERSION.search(head) and "Versions of relevant libraries" in text):
        return "collect_env"
    if head.lstrip().startswith("# packages in environment at"):
        return "conda"
    if head.lstrip().startswith("[") and '"version"' in head and '"name"' in head:
        return "pip-json"
    if re.match(r"^Package\s+Version\s*$", lines[0]) or (len(lines) > 1 and re.match(r"^-+\s+-+", lines[1])):
        return "pip-list"
    body = [line for line in lines if not line.lstrip().startswith(("#", "-e ", "--"))]
    if body and sum(1 for line in body if _FREEZE.match(line) or _DIRECT_REF.match(line)) >= max(1, int(len(body) * 0.8)):
        return "freeze"
    return None


def parse_packages(text: str, source: str) -> Packages:
    kind = looks_like_packages(text) or "freeze"
    versions: dict[str, str] = {}
    if kind == "pip-json":
        try:
            for entry in json.loads(text):
                if isinstance(entry, dict) and entry.get("name") and entry.get("version"):
                    versions[normalise_package(str(entry["name"]))] = str(entry["version"])
        except (ValueError, RecursionError):  # cut short, or nested past the interpreter's stack
            pass
        return Packages(versions, source)
    for line in text.splitlines():
        if kind == "collect_env":
            match = _COLLECT_ENV_LIB.match(line.strip())
        elif kind in ("pip-list", "conda"):
            match = _COLUMNS.match(line.strip()) if not line.startswith("#") else None
        else:
            match = _FREEZE.match(line)
        if match:
            versions.setdefault(normalise_package(match.group(1)), match.group(2))
    if kind == "collect_env":
        torch = _TORCH_VERSION.search(text)
        if torch and torch.group(1) not in ("N/A", "Could"):
            versions.setdefault("torch", torch.group(1))
    return Packages(versions, source)
