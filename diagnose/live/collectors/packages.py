"""Package versions of the run's own environment: its interpreter (config `python`/`venv`, the
`executable` wandb recorded, or a .venv/venv in its working directory) asked through
importlib.metadata (fast), else `python -m pip list --format=json`; never diagnose's own
environment. When only wandb's requirements.txt of the run is there, that is used.
"""

from __future__ import annotations

import json
import os

from diagnose.evidence.model import FileKind
from diagnose.live.collectors.base import Captured, Context, Output, display_path

# Runs in the run's interpreter; JSON like `pip list --format=json` so one parser reads both.
SNIPPET = (
    "import json, importlib.metadata as m\n"
    "seen = {}\n"
    "for d in m.distributions():\n"
    "    name = d.metadata['Name']\n"
    "    if name and name.lower() not in seen:\n"
    "        seen[name.lower()] = {'name': name, 'version': d.version}\n"
    "print(json.dumps(sorted(seen.values(), key=lambda e: e['name'].lower())))\n"
)


def _interpreter(ctx: Context) -> tuple[str | None, str]:
    spec = ctx.spec
    if spec.python:
        return spec.python, spec.python_source
    if spec.workdir:
        for folder in (".venv", "venv"):
            candidate = os.path.join(spec.workdir, folder, "bin", "python")
            if ctx.host.exists(candidate):
                return candidate, f"{folder} in the run's directory"
    return None, ""


def collect(ctx: Context) -> Output:
    spec = ctx.spec
    python, source = _interpreter(ctx)
    problems: list[str] = []
    if python is not None:
        if "/" in python and not ctx.host.exists(python):
            problems.append(f"the run's interpreter {python} ({source}) does not exist")
        else:
            env: dict[str, str | None] = {"PYTHONPATH": None, "PYTHONHOME": None, "PYTHONSTARTUP": None}
            for label, argv in (
                ("importlib.metadata", [python, "-c", SNIPPET]),
                ("pip list", [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]),
            ):
                if ctx.remaining() <= 0:
                    problems.append(f"{label}: no time left")
                    break
                result = ctx.run(argv, env=env)
                if result.timed_out:
                    problems.append(result.failure())
                    break
                if result.ok:
                    try:
                        listing = json.loads(result.out)
                    except ValueError:
                        problems.append(f"{python} -c ({label}) printed no JSON")
                        continue
                    if isinstance(listing, list):
                        path = ctx.save("packages.json", json.dumps(listing, indent=0).encode())
                        origin = f"{python} ({label})"
                        return Output(files=[Captured(FileKind.PACKAGES, "env/packages.json", path, origin, None, None,
                                                      path.stat().st_size)], run={"python": python, "python_source": source})
                problems.append(f"{label}: {result.failure()}")
    else:
        problems.append("the run's Python interpreter is not known (set python or venv in diagnose.toml)")
    if spec.requirements:
        requirements = spec.requirements[0]
        try:
            st = ctx.host.stat(requirements)
        except PermissionError:
            st = None
        if st is not None:
            out = Output(files=[Captured(FileKind.PACKAGES, "env/requirements.txt", ctx.host.local_path(requirements),
                                         display_path(requirements), None, st.mtime, st.size)])
            out.notes.append("package versions from wandb's requirements.txt: " + "; ".join(problems))
            return out
    timed_out = any("timed out" in p for p in problems)
    return Output(status="timeout" if timed_out else "gap", reason="; ".join(problems))
