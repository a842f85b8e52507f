"""The real CLI in a subprocess, the way users and CI run it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.paths import REPO


def run_cli(args: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.setdefault("DIAGNOSE_CACHE_DIR", str(REPO / ".pytest_cache" / "diagnose-cache"))
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout)
