"""CLI habits of a good command-line tool: --color with NO_COLOR/FORCE_COLOR, -q, `-` for
standard input, config found in parent folders and in pyproject.toml, missing paths said as
such, shell completion, and a progress line on stderr only when a terminal waits."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnose.cli import resolve_color
from tests.support.cli import run_cli
from tests.support.paths import REPO
from tests.support.report import CASES, CI, invoke

ANSI = re.compile(r"\x1b\[[0-9;]*m")
OOM = [str(REPO / p) for p in CASES["oom-cgroup"]]
CLEAN_ENV = {"NO_COLOR": "", "FORCE_COLOR": ""}


def plain_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE")}
    env.setdefault("DIAGNOSE_CACHE_DIR", str(REPO / ".pytest_cache" / "diagnose-cache"))
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
        stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "diagnose", *args], capture_output=True, env=env or plain_env(),
                          cwd=cwd or REPO, input=stdin, timeout=120)


def run_on_pty(args: list[str], env: dict[str, str], stdout_tty: bool = True, stderr_tty: bool = False,
               timeout: float = 120) -> tuple[int, str, str]:
    """Run with stdout and/or stderr on a pseudo-terminal, as at a terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=slave if stdout_tty else subprocess.PIPE, stderr=slave if stderr_tty else subprocess.PIPE)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    out, err = proc.communicate(timeout=timeout)
    tty_text = b"".join(chunks).decode("utf-8", "replace")
    piped = (out or err or b"").decode("utf-8", "replace")
    return proc.returncode, tty_text, piped


# ---------------------------------------------------------------- colour

@pytest.mark.parametrize(("choice", "env", "expected"), [
    ("auto", {}, None),
    ("auto", {"NO_COLOR": "1"}, False),
    ("auto", {"NO_COLOR": ""}, None),  # no-color.org: only a non-empty value counts
    ("auto", {"FORCE_COLOR": "1"}, True),
    ("auto", {"FORCE_COLOR": "0"}, None),
    ("auto", {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
    ("always", {"NO_COLOR": "1"}, True),  # the flag wins over the environment
    ("never", {"FORCE_COLOR": "1"}, False),
])
def test_color_choice(choice: str, env: dict[str, str], expected: bool | None) -> None:
    assert resolve_color(choice, env) is expected


def test_colour_in_a_pipe_only_when_asked() -> None:
    assert not ANSI.search(run(["scan", *OOM]).stdout.decode())
    forced = run(["scan", *OOM], env=plain_env(FORCE_COLOR="1")).stdout.decode()
    assert ANSI.search(forced) and "memory.host-oom-kill" in ANSI.sub("", forced)  # a CI log gets colour
    assert ANSI.search(run(["scan", *OOM, "--color", "always"], env=plain_env(NO_COLOR="1")).stdout.decode())
    assert not ANSI.search(run(["scan", *OOM, "--color", "never"], env=plain_env(FORCE_COLOR="1")).stdout.decode())


def test_colour_on_a_terminal_unless_no_color() -> None:
    code, tty, _ = run_on_pty(["scan", *OOM], plain_env(TERM="xterm-256color"))
    assert code == 1 and ANSI.search(tty), tty[:300]
    code, tty, _ = run_on_pty(["scan", *OOM], plain_env(TERM="xterm-256color", NO_COLOR="1"))
    assert code == 1 and not ANSI.search(tty) and "memory.host-oom-kill" in tty
    code, tty, _ = run_on_pty(["scan", *OOM, "--color", "never"], plain_env(TERM="xterm-256color"))
    assert not ANSI.search(tty)


# ---------------------------------------------------------------- -q

def test_quiet_prints_only_the_summary_line() -> None:
    result = invoke(["scan", *CASES["oom-cgroup"], "-q"])
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()  # the verdict line the full report ends with
    assert line.startswith("scan: ") and "(memory.host-oom-kill)" in line
    full = " ".join(invoke(["scan", *CASES["oom-cgroup"]]).stdout.split())  # the report wraps at the width
    assert full.endswith(line)
    healthy = invoke(["scan", *CASES["healthy"], "-q"])
    assert healthy.exit_code == 0 and healthy.stdout.startswith("scan: no cause found at warning or above")
    assert len(healthy.stdout.splitlines()) == 1
    # other formats are whole under -q
    doc = json.loads(invoke(["scan", *CASES["oom-cgroup"], "-q", "--format", "json"]).stdout)
    assert doc["causes"][0]["id"] == "memory.host-oom-kill"


# ---------------------------------------------------------------- standard input

def test_scan_reads_standard_input() -> None:
    dmesg = (CI / "oom-cgroup" / "dmesg.txt").read_bytes()
    result = run(["scan", "-", "--format", "json"], stdin=dmesg)
    assert result.returncode == 1, result.stderr
    cause = json.loads(result.stdout)["causes"][0]
    assert cause["id"] == "memory.host-oom-kill"
    assert cause["evidence"][0]["source"] == "<stdin>"
    assert dmesg.splitlines()[cause["evidence"][0]["line"] - 1].decode() == cause["evidence"][0]["text"]
    # with other files, and with a forced kind
    both = run(["scan", str(CI / "oom-cgroup" / "train.log"), "dmesg:-", "--format", "json"], stdin=dmesg)
    assert json.loads(both.stdout)["causes"][0]["id"] == "memory.host-oom-kill"


def test_standard_input_that_is_empty_or_given_twice_is_refused() -> None:
    empty = run(["scan", "-"], stdin=b"")
    assert empty.returncode == 2 and b"standard input is empty" in empty.stderr and b"Traceback" not in empty.stderr
    twice = run(["scan", "-", "log:-"], stdin=b"x\n")
    assert twice.returncode == 2 and b"only once" in twice.stderr


def test_the_stdin_copy_is_removed(tmp_path: Path) -> None:
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("diagnose-stdin-*"))
    run(["scan", "-"], stdin=(CI / "healthy" / "train.log").read_bytes(), env=plain_env(TMPDIR=str(tmp_path)))
    assert list(tmp_path.glob("diagnose-stdin-*")) == []
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("diagnose-stdin-*")) <= before


# ---------------------------------------------------------------- config discovery

RULE = (CI / "rules" / "testsecrets.echoed-credentials.yaml").read_text()


def project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "proj"
    deep = root / "runs" / "flex7"
    deep.mkdir(parents=True)
    (root / "team-rules" / "testsecrets").mkdir(parents=True)
    (root / "team-rules" / "testsecrets" / "testsecrets.echoed-credentials.yaml").write_text(RULE)
    return root, deep


def user_rules_listed(cwd: Path, env: dict[str, str]) -> bool:
    listing = run(["rules", "list"], cwd=cwd, env=env)
    assert listing.returncode == 0, listing.stderr
    return b"testsecrets.echoed-credentials" in listing.stdout


def test_config_is_found_in_a_parent_folder(tmp_path: Path) -> None:
    root, deep = project(tmp_path)
    env = plain_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    assert not user_rules_listed(deep, env)
    (root / "diagnose.toml").write_text('rules = ["team-rules"]\n')
    assert user_rules_listed(deep, env)  # relative to the config file, not to where diagnose runs


def test_config_in_pyproject_tool_table(tmp_path: Path) -> None:
    root, deep = project(tmp_path)
    env = plain_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    (root / "pyproject.toml").write_text('[project]\nname = "trainer"\n\n[tool.ruff]\nline-length = 100\n')
    assert not user_rules_listed(deep, env)  # a pyproject.toml without [tool.diagnose] is passed over
    (root / "pyproject.toml").write_text('[project]\nname = "trainer"\nrules = 3\n\n[tool.diagnose]\nrules = ["team-rules"]\n')
    assert user_rules_listed(deep, env)
    # a nearer diagnose.toml wins
    (deep / "diagnose.toml").write_text("rules = []\n")
    assert not user_rules_listed(deep, env)
    (deep / "diagnose.toml").unlink()
    # problems are said with the pyproject line
    (root / "pyproject.toml").write_text('[project]\nname = "t"\n\n[tool.diagnose]\nrules = ["team-rules"]\n\n'
                                         '[tool.diagnose.run]\nlogz = "x"\n')
    bad = run(["flex7"], cwd=deep, env=env)
    assert bad.returncode == 2 and b"pyproject.toml:8: unknown key 'logz' in [run]" in bad.stderr, bad.stderr


def test_a_config_others_may_write_is_passed_over(tmp_path: Path) -> None:
    root, deep = project(tmp_path)
    env = plain_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    config = root / "diagnose.toml"
    config.write_text('rules = ["team-rules"]\n')
    config.chmod(0o666)
    assert not user_rules_listed(deep, env)
    config.chmod(0o644)
    root.chmod(0o777)  # a folder anyone may write (like /tmp): what is in it could be planted
    try:
        assert not user_rules_listed(deep, env)
    finally:
        root.chmod(0o755)
    assert user_rules_listed(deep, env)


# ---------------------------------------------------------------- missing paths

@pytest.mark.parametrize(("args", "said"), [
    (["./nope.tar.gz"], "./nope.tar.gz: no such bundle"),
    (["runs/nope/"], "runs/nope/: no such bundle"),
    (["nope.tgz"], "nope.tgz: no such bundle"),
    (["flex7", "--dir", "/nope"], "--dir /nope: no such directory"),
])
def test_a_missing_bundle_or_folder_is_said_as_such(tmp_path: Path, args: list[str], said: str) -> None:
    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"diagnose: error: {said}") and len(result.stderr.splitlines()) == 1


def test_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    result = run_cli(["flex7", "--dir", str(tmp_path / "f")], cwd=tmp_path)
    assert result.returncode == 2 and "not a directory" in result.stderr


# ---------------------------------------------------------------- completion

def complete(**env: str) -> str:
    return run([], env=plain_env(**env)).stdout.decode()


def test_shell_completion_scripts_and_answers() -> None:
    script = complete(_DIAGNOSE_COMPLETE="bash_source")
    assert "_diagnose_completion" in script and "complete -o nosort -F _diagnose_completion diagnose" in script
    assert "compdef" in complete(_DIAGNOSE_COMPLETE="zsh_source")
    assert "complete --no-files --command diagnose" in complete(_DIAGNOSE_COMPLETE="fish_source")
    words = complete(_DIAGNOSE_COMPLETE="bash_complete", COMP_WORDS="diagnose sc", COMP_CWORD="1")
    assert "plain,scan" in words.splitlines()
    options = complete(_DIAGNOSE_COMPLETE="bash_complete", COMP_WORDS="diagnose scan --fa", COMP_CWORD="2")
    assert "plain,--fail-on" in options.splitlines()
    fail_on = complete(_DIAGNOSE_COMPLETE="bash_complete", COMP_WORDS="diagnose scan x --fail-on ", COMP_CWORD="4")
    assert {"plain,critical", "plain,never"} <= set(fail_on.splitlines())


# ---------------------------------------------------------------- progress

def test_progress_on_a_terminal_only() -> None:
    env = plain_env(TERM="xterm-256color", DIAGNOSE_PROGRESS_AFTER="0")
    code, tty, _ = run_on_pty(["scan", *OOM, "--format", "json"], env, stdout_tty=False, stderr_tty=True)
    assert code == 1 and "diagnose: scanning 2 file(s)" in tty, tty[:500]
    piped = run(["scan", *OOM, "--format", "json"], env=env)
    assert b"scanning" not in piped.stderr  # never in a pipe or a CI log
    # a short scan with the default delay shows nothing
    code, tty, _ = run_on_pty(["scan", *OOM, "--format", "json"], plain_env(TERM="xterm-256color"),
                              stdout_tty=False, stderr_tty=True)
    assert "scanning" not in tty
