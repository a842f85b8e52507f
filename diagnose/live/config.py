"""Where the config file is, without importing the config machinery (kept cheap: every
command asks, and `diagnose scan` of a small log must start fast)."""

from __future__ import annotations

import os
from pathlib import Path

CONFIG_NAME = "diagnose.toml"


def default_config_path(cwd: Path | None = None) -> Path | None:
    """./diagnose.toml, else $XDG_CONFIG_HOME (or ~/.config)/diagnose/config.toml, else None."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    for candidate in ((cwd or Path.cwd()) / CONFIG_NAME, Path(base) / "diagnose" / "config.toml"):
        try:
            if candidate.is_file():
                return candidate
        except OSError:  # a home we may not look into (HOME of another user) has no config for us
            continue
    return None
