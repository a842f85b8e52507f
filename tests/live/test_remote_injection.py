"""A run id or a path can never run anything on the remote side (or here): every remote command
is an argument list quoted once for the remote shell (and once more for a prefix ending in
`sh -c`), and every path, id and pattern is an argument of a constant script.

Hostile run ids are refused (exit 2) before anything connects. Hostile names that are allowed
to exist (files and folders in the remote workspace named after the run with shell
metacharacters, quotes, a newline, invalid UTF-8; a tmux session name from the config; a run
id starting with a dash; a 200-character id) go through discovery, stat, listing, reading,
the remote grep and tmux, through a real sshd and the fake-pct hop; afterwards no marker file
exists on either side."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.remote import INSIDE, diagnose_remote

MARK = "diagnose-pwned"
IDS = ["x; touch diagnose-pwned", "$(touch diagnose-pwned)", "`touch diagnose-pwned`", "x\ntouch diagnose-pwned",
       "'\"; touch diagnose-pwned; #", "a" * 300, "flex7\u00e9", "x|touch diagnose-pwned", "x&&touch diagnose-pwned"]
NAMES = [b"train_flex7 $(touch diagnose-pwned-1).log", b"flex7;touch diagnose-pwned-2.log",
         b"flex7`touch diagnose-pwned-3`.log", b"flex7\ntouch diagnose-pwned-4.log",
         b"flex7'\"; touch diagnose-pwned-5; #.log", b"flex7-\xff\xfe.log", "flex7-\u00e9t\u00e9.log".encode(),
         b"flex7 -rf.log", b"--flex7.log"]
LINE = b"2026-11-30 04:36:47,572 INFO train: epoch 1 step 10 loss 2.3012 lr 1.00e-03\n"


def markers(container: object, *places: Path) -> list[str]:
    """Marker files (diagnose-pwned*) here and inside the container."""
    found = [str(p) for place in places for p in place.glob(f"{MARK}*")]
    found += [str(p) for p in Path("/tmp").glob(f"{MARK}*")] + [str(p) for p in Path("/root").glob(f"{MARK}*")]
    found += [str(p) for p in Path("/").glob(f"{MARK}*")]
    inside = container.run("sh", "-c", f"ls -d / /root /tmp {INSIDE} 2>/dev/null | while read d; do "  # type: ignore[attr-defined]
                           f"ls -a \"$d\" | grep '^{MARK}' | sed \"s|^|$d/|\"; done", check=False)
    return found + inside.stdout.split()


@pytest.mark.parametrize("run_id", IDS, ids=range(len(IDS)))
def test_hostile_run_ids_are_refused_before_connecting(tmp_path, sshd, run_id):
    result = run_cli([run_id, "--host", sshd.target, "--config", str(_toml(tmp_path, sshd))], cwd=tmp_path)
    assert result.returncode == 2, result.stdout[-300:]
    assert "not a run id" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not sshd.sessions(), "it connected for an id it refuses"
    assert not list(tmp_path.glob(f"{MARK}*")) and not list(Path("/tmp").glob(f"{MARK}*"))


def _toml(tmp_path: Path, sshd: object, extra: str = "") -> Path:
    path = tmp_path / "diagnose.toml"
    path.write_text(f'[host]\nssh_config = "{sshd.client_config}"\n{extra}')  # type: ignore[attr-defined]
    return path


def plant(workspace: Path) -> None:
    for name in NAMES:
        path = os.path.join(os.fsencode(workspace), name)
        with open(path, "wb") as out:
            out.write(LINE)
    folder = os.path.join(os.fsencode(workspace), b"flex7 $(touch diagnose-pwned-6)")
    os.mkdir(folder)
    with open(os.path.join(folder, b"rank0.log"), "wb") as out:
        out.write(LINE)


@pytest.mark.parametrize("shell_prefix", [False, True], ids=["argv-prefix", "sh-c-prefix"])
def test_hostile_names_run_nothing_remotely(tmp_path, sshd, container, shell_prefix):
    """Through `fake-pct exec 200 --` (argv appended) and `fake-pct exec 200 -- sh -c` (the
    command as one word, quoted a second time)."""
    plant(container.workspace)
    prefix = container.exec_prefix + (" sh -c" if shell_prefix else "")
    config = _toml(tmp_path, sshd, f'[run]\ndir = "{INSIDE}"\ntmux_session = "x$(touch {MARK}-7)`touch {MARK}-8`"\n')
    code, data, _err = diagnose_remote(["flex7", "--host", sshd.target, "--exec", prefix, "--config", str(config)],
                                       cwd=tmp_path)
    assert code in (0, 1)
    paths = [log["path"] for log in data["run"]["logs"]]  # type: ignore[index]
    assert f"{INSIDE}/flex7;touch {MARK}-2.log" in paths, paths
    assert f"{INSIDE}/flex7\\x0atouch {MARK}-4.log" in paths  # control characters are shown, never printed
    assert f"{INSIDE}/flex7 $(touch {MARK}-6)/rank0.log" in paths
    assert any("\u00e9t\u00e9" in p for p in paths)
    assert markers(container, tmp_path, container.workspace) == []


def test_dash_and_long_ids_reach_their_files(tmp_path, sshd, container):
    """`-rf` is a run id (letters and a dash): it names files, never options, there."""
    long_id = "r" * 200
    for run_id in ("-rf", long_id):
        (container.workspace / f"train_{run_id}.log").write_bytes(LINE)
    config = _toml(tmp_path, sshd, f'[run]\ndir = "{INSIDE}"\n')
    for run_id in ("-rf", long_id):
        result = run_cli(["run", "--host", sshd.target, "--exec", container.exec_prefix, "--config", str(config),
                          "--format", "json", "--", run_id], cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        data = json.loads(result.stdout)
        assert [log["path"] for log in data["run"]["logs"]] == [f"{INSIDE}/train_{run_id}.log"]
    assert markers(container, tmp_path, container.workspace) == []
