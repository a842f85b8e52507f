"""Fixtures that build the live stories of tests/live/test_stories.py from real machine state:
real processes (the run's, and an unrelated one the kernel OOM-kills in its own memory cgroup),
real tmux servers on sockets under a private $TMUX_TMPDIR, real files, the real CLI.

Everything a fixture makes is removed in its teardown (processes by pid or process group,
tmux servers, cgroups, files), so later diagnoses on the machine are unaffected."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.identity import Children
from tests.support.launch import Launches, make_session
from tests.support.live import PrivateTmux, tmux_env
from tests.support.paths import FIXTURES

MEMCG = Path("/sys/fs/cgroup/memory")
HAVE_MEMCG = os.geteuid() == 0 and (MEMCG / "memory.limit_in_bytes").exists()
MEMCG_REASON = ("needs root and the cgroup v1 memory controller at /sys/fs/cgroup/memory "
                "(the kernel OOM-kills a child in a memory cgroup)")
TMUX_REASON = "needs the tmux program (apt-get install tmux)"
# The interpreter the stories' processes run under: `python3` on the command line, so the kernel
# names them python3 (comm) like any training job on a shared machine. Only the stdlib is used.
PYTHON3 = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else (shutil.which("python3") or "python3")

# A line's timestamp in the shape the fixture logs print ("2026-11-30 04:36:47,572").
STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")

# The child that replays a real log as its own output: each line is printed when its turn comes
# (the original gaps divided by SPEEDUP), with its timestamp replaced by the time it is printed
# (shifted by SHIFT seconds); lines without a timestamp (tracebacks, warnings) are printed as they
# were. Then it exits with END, or sleeps forever when END is "hang". Its parameters come in the
# environment, so that its command line is the run's own (`python3 train.py flex7`).
REPLAY = textwrap.dedent('''\
    import datetime, os, re, sys, time
    source, end = os.environ.pop("REPLAY_SOURCE"), os.environ.pop("REPLAY_END")
    speedup, shift = float(os.environ.pop("REPLAY_SPEEDUP")), float(os.environ.pop("REPLAY_SHIFT"))
    stamp = re.compile(r"\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d,\\d{3}")
    def parse(text):
        return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    def now():
        t = time.time() + shift
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + ",%03d" % (int(t * 1000) % 1000)
    last = None
    for line in open(source, encoding="utf-8").read().splitlines():
        found = stamp.search(line)
        if found:
            at = parse(found.group(0))
            if last is not None and at > last:
                time.sleep(min((at - last) / speedup, 1.0))
            last = at
            line = stamp.sub(lambda _: now(), line, count=1)
        print(line, flush=True)
    if end == "hang":
        while True:
            time.sleep(3600)
    sys.exit(int(end))
''')


@dataclass
class OomKill:
    """A process the kernel OOM-killed in its own memory cgroup."""

    pid: int
    cgroup: str  # as the kernel names it in oom_memcg= / task_memcg=
    at: float  # wall clock when its death (exit -9) was seen
    dmesg: str  # the kernel's "Killed process PID (...)" line


def dmesg_kill_line(pid: int, timeout: float = 10) -> str:
    """The kernel's line for the OOM kill of pid (it is in the ring buffer before the victim dies)."""
    deadline = time.time() + timeout
    while True:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30).stdout
        lines = [line for line in out.splitlines() if f"Killed process {pid} (" in line]
        if lines:
            return lines[-1]
        if time.time() > deadline:
            raise AssertionError(f"no OOM kill of pid {pid} in dmesg")
        time.sleep(0.2)


def make_memcg(name: str, limit: int) -> Path:
    group = MEMCG / name
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(limit))
    memsw = group / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        memsw.write_text(str(limit))  # no escape into swap
    return group


def remove_memcg(group: Path) -> None:
    for _ in range(100):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # the last task is still leaving
            time.sleep(0.05)
    raise AssertionError(f"could not remove the memory cgroup {group}")


def join(group: Path) -> Callable[[], None]:
    """A preexec_fn that moves the child into the memory cgroup before it execs."""
    return lambda: (group / "cgroup.procs").write_text(str(os.getpid()))


HOG = "blocks = []\nwhile True:\n    blocks.append(b'\\x01' * (8 << 20))\n"


def oom_kill_in_own_memcg(tag: str, limit: int = 64 << 20) -> OomKill:
    group = make_memcg(f"diagnose-unrelated-{tag}-{os.getpid()}-{time.monotonic_ns()}", limit)
    try:
        child = subprocess.Popen(["python3", "-c", HOG], executable=PYTHON3, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, preexec_fn=join(group), cwd="/")
        try:
            status = child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert status == -9, f"the unrelated hog ended with {status}, not the OOM killer's SIGKILL"
        at = time.time()
        return OomKill(child.pid, "/" + group.name, at, dmesg_kill_line(child.pid))
    finally:
        remove_memcg(group)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark, at collection, the stories that need a capability this machine lacks, with the reason."""
    from tests.support.remote import NS_REASON, SSHD_REASON, have_namespaces, have_sshd

    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if not have_sshd() and "sshd" in names:
            item.add_marker(pytest.mark.skip(reason=SSHD_REASON))
        if not have_namespaces() and "container" in names:
            item.add_marker(pytest.mark.skip(reason=NS_REASON))
        if not HAVE_MEMCG and names & {"unrelated_oom_kill", "unrelated_oom_kill_module", "memcg", "oom_kill_now"}:
            item.add_marker(pytest.mark.skip(reason=MEMCG_REASON))
        if shutil.which("tmux") is None and "tmpdir_tmux" in names:
            item.add_marker(pytest.mark.skip(reason=TMUX_REASON))


@pytest.fixture
def unrelated_oom_kill() -> OomKill:
    """Another user's python3 job on this machine, OOM-killed by the kernel in its own 64 MB
    memory cgroup just before the story: its pid, cgroup, time and dmesg line. The cgroup is gone
    when the story starts, as after any finished container or Slurm step."""
    if not HAVE_MEMCG:
        pytest.skip(MEMCG_REASON)
    return oom_kill_in_own_memcg("other-user")


@pytest.fixture
def oom_kill_now() -> Callable[[], OomKill]:
    """oom_kill_now(): unrelated_oom_kill, at the moment the story calls it (right after the
    run's last write: the closest a neighbour's kill comes to looking like the run's own)."""
    if not HAVE_MEMCG:
        pytest.skip(MEMCG_REASON)
    return lambda: oom_kill_in_own_memcg("same-second")


@pytest.fixture(scope="module")
def unrelated_oom_kill_module() -> OomKill:
    """unrelated_oom_kill, once for a module whose story is built once."""
    if not HAVE_MEMCG:
        pytest.skip(MEMCG_REASON)
    return oom_kill_in_own_memcg("other-user")


@dataclass
class Memcg:
    path: Path

    @property
    def name(self) -> str:
        """As the kernel names it in oom_memcg= / task_memcg=."""
        return "/" + self.path.name

    def join(self) -> Callable[[], None]:
        """A preexec_fn that moves the child into this memory cgroup before it execs."""
        return join(self.path)


@pytest.fixture
def memcg() -> Iterator[Callable[[int], Memcg]]:
    """memcg(limit_bytes): a fresh memory cgroup (memsw limited alike); all are removed in teardown,
    their remaining tasks SIGKILLed first."""
    if not HAVE_MEMCG:
        pytest.skip(MEMCG_REASON)
    made: list[Path] = []

    def make(limit: int) -> Memcg:
        group = make_memcg(f"diagnose-story-{os.getpid()}-{time.monotonic_ns()}", limit)
        made.append(group)
        return Memcg(group)

    yield make
    for group in made:
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        remove_memcg(group)


@pytest.fixture
def dmesg_kill() -> Callable[[int], str]:
    """dmesg_kill(pid): the kernel's "Killed process PID (...)" line (fails when there is none)."""
    return dmesg_kill_line


@pytest.fixture
def python3() -> str:
    """The interpreter of the stories' processes (stdlib only); they run as `python3 ...`."""
    return PYTHON3


@pytest.fixture
def seeds() -> Path:
    """The repo's fixtures/ folder (real logs of real runs)."""
    return FIXTURES


@pytest.fixture
def story(tmp_path: Path) -> Iterator[Path]:
    """The run's working directory (fresh, empty); removed with everything else under tmp_path."""
    work = tmp_path / "story"
    work.mkdir()
    yield work
    shutil.rmtree(tmp_path, ignore_errors=True)
    tmp_path.mkdir(exist_ok=True)  # pytest's own cleanup expects the directory


@pytest.fixture
def procs() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start processes that teardown kills (their whole process group when they lead one)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@pytest.fixture
def replay(procs: Callable[..., subprocess.Popen[bytes]]) -> Callable[..., subprocess.Popen[bytes]]:
    """replay(run_dir, lines, log, argv=["train.py", ...], speedup=10, shift=0, end="0"):
    a real python3 child, started in run_dir as `python3 train.py ...` (train.py is the replayer),
    prints the lines as its own output into log (created fresh) and exits with `end` ("hang":
    sleeps forever; killed in teardown). Returns the process (not waited for)."""

    def start(run_dir: Path, lines: list[str], log: Path, argv: list[str] | None = None, speedup: float = 10,
              shift: float = 0, end: str = "0") -> subprocess.Popen[bytes]:
        (run_dir / "train.py").write_text(REPLAY)
        source = run_dir.parent / f"replay-source-{time.monotonic_ns()}.txt"  # outside the run dir
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
        env = {**os.environ, "REPLAY_SOURCE": str(source), "REPLAY_SPEEDUP": str(speedup),
               "REPLAY_SHIFT": str(shift), "REPLAY_END": end}
        with open(log, "wb") as out:
            return procs(["python3", *(argv or ["train.py"])], executable=PYTHON3, cwd=run_dir, stdout=out,
                         stderr=subprocess.STDOUT, env=env)

    return start


class TmpdirTmux(PrivateTmux):
    """tmux exactly as a user types it (no -S, no -L), on $TMUX_TMPDIR=<private dir>: the server's
    socket is the default one, $TMUX_TMPDIR/tmux-UID/default, that `diagnose` probes with no config
    when it runs with the same $TMUX_TMPDIR. Never the machine's real /tmp/tmux-UID."""

    def __init__(self, tmpdir: Path) -> None:
        super().__init__(tmpdir / f"tmux-{os.getuid()}" / "default")
        self.tmpdir = tmpdir
        self.env = {**tmux_env(), "TMUX_TMPDIR": str(tmpdir)}
        self.pane_pids: list[int] = []

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-f", "/dev/null", *args], capture_output=True, text=True, env=self.env,
                              check=check, timeout=20)

    def new_session(self, session: str, command: str, cwd: Path) -> int:
        """`tmux new-session -d -s SESSION COMMAND` in cwd; returns the server's pid."""
        subprocess.run(["tmux", "-f", "/dev/null", "new-session", "-d", "-s", session, command], cwd=cwd,
                       env=self.env, check=True, timeout=20, capture_output=True)
        self.pids.append(self.server_pid())
        self.pane_pids.append(int(self.tmux("display-message", "-p", "-t", session, "#{pane_pid}").stdout))
        return self.pids[-1]

    def panes_alive(self, timeout: float = 3) -> list[int]:
        """The pane processes still alive after `timeout` s (they die of SIGHUP when the server does)."""
        deadline = time.time() + timeout
        while True:
            alive = [pid for pid in self.pane_pids if _alive(pid)]
            if not alive or time.time() > deadline:
                return alive
            time.sleep(0.05)

    def close(self) -> None:
        super().close()
        for pid in self.pane_pids:  # each pane leads its own session and process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(self.tmpdir, ignore_errors=True)  # the stale socket with it


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture
def tmpdir_tmux(tmp_path: Path) -> Iterator[TmpdirTmux]:
    if shutil.which("tmux") is None:
        pytest.skip(TMUX_REASON)
    # Short: a unix socket path must fit in 108 bytes.
    tmpdir = Path(f"/tmp/dgs-{os.getpid()}-{time.monotonic_ns() % 10**8}")
    tmpdir.mkdir(mode=0o700)
    server = TmpdirTmux(tmpdir)
    yield server
    server.close()


@dataclass
class Diagnosis:
    code: int
    data: dict[str, Any]
    stderr: str


@pytest.fixture
def diagnose(request: pytest.FixtureRequest) -> Callable[..., Diagnosis]:
    """diagnose(args, cwd, env=None): the real CLI with --format json; stdout parsed.
    With $DIAGNOSE_STORIES_DUMP=DIR set, every call's exit code, stdout and stderr are also
    written to DIR/<test>-<n>.json, to read what the tool answered."""
    calls = [0]

    def call(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Diagnosis:
        result = run_cli([*args, "--format", "json"], cwd=cwd, env=env)
        dump = os.environ.get("DIAGNOSE_STORIES_DUMP")
        if dump:
            calls[0] += 1
            Path(dump).mkdir(parents=True, exist_ok=True)
            record = {"args": args, "code": result.returncode, "stdout": result.stdout, "stderr": result.stderr}
            (Path(dump) / f"{request.node.name}-{calls[0]}.json").write_text(json.dumps(record, indent=1))
        assert result.returncode in (0, 1), f"exit {result.returncode}: {result.stderr}"
        return Diagnosis(result.returncode, json.loads(result.stdout), result.stderr)

    return call


@pytest.fixture
def via_bundle(diagnose: Callable[..., Diagnosis], tmp_path: Path) -> Callable[..., Diagnosis]:
    """via_bundle(run_id, cwd, env=None): `diagnose collect RUN -o tmp/b.tar.gz`, then
    `diagnose tmp/b.tar.gz --format json` from elsewhere, without the story's environment."""

    def call(run_id: str, cwd: Path, env: dict[str, str] | None = None) -> Diagnosis:
        out = tmp_path / "tmp" / "b.tar.gz"
        out.parent.mkdir(exist_ok=True)
        collected = run_cli(["collect", run_id, "-o", str(out)], cwd=cwd, env=env)
        assert collected.returncode == 0, f"collect exit {collected.returncode}: {collected.stderr}"
        assert out.is_file(), collected.stderr
        return diagnose([str(out)], cwd=tmp_path / "tmp")

    return call


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    try:
        yield kids
    finally:
        kids.close()


@pytest.fixture
def launches(tmp_path: Path) -> Iterator[Launches]:
    tmux_dir = Path(f"/tmp/dgl-{os.getpid()}-{time.monotonic_ns() % 10**8}")  # a socket path fits in 108 bytes
    tmux_dir.mkdir(mode=0o700)
    helper = Launches(tmp_path, tmux_dir, make_session("run"))
    try:
        yield helper
    finally:
        helper.close()


# ---------------------------------------------------------------- remote runs (tests/live/test_remote_*.py)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real sshd on a free loopback port, with generated host and user keys, a known_hosts
    file and an ssh client config (never the real ~/.ssh); stopped after the module."""
    from tests.support.remote import SSHD_REASON, Sshd, have_sshd

    if not have_sshd():
        pytest.skip(SSHD_REASON)
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def container(tmp_path: Path) -> Iterator[Any]:
    """A container stand-in (pid and mount namespaces, its own /tmp) whose workspace, seen at
    /mnt/workspace inside, is tmp_path/workspace here; `container.exec_prefix` reaches it."""
    from tests.support.remote import NS_REASON, Container, have_namespaces

    if not have_namespaces():
        pytest.skip(NS_REASON)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    box = Container(tmp_path / "ct", workspace)
    yield box
    box.stop()


@pytest.fixture(scope="session")
def gloo_cluster(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real 2-rank gloo run of tests/support/multinode.py, made once for every multi-node test."""
    from tests.support.multinode import run_gloo_cluster, torch_reason

    reason = torch_reason()
    if reason is not None:
        pytest.skip(reason)
    return run_gloo_cluster(tmp_path_factory.mktemp("nodes"))
