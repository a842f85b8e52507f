"""Where bytes come from: the machine a run lives on.

Collectors ask a Host for everything (commands, file stats, small reads, the process table)
and never touch `os` or `subprocess` themselves, so a host reached over SSH (or
`ssh host pct exec 200 --`) can later implement the same methods. LocalHost is this machine.

Every command runs in its own process group with a hard time limit; on timeout the whole
group is killed (a `nvidia-smi` stuck in the driver, a `dmesg` wrapper that never returns,
and anything they started) and the caller gets a result saying so, never an exception.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import pwd
import selectors
import shutil
import signal
import socket
import stat as stat_module
import subprocess
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Output beyond this is dropped as it is read (a command gone wild must not fill memory): a
# command whose start matters is killed there, one whose end matters (dmesg, keep="tail") is
# read to its end keeping the last MAX_OUTPUT bytes.
MAX_OUTPUT = 64 * 1024 * 1024
_READ = 64 * 1024


class _Kept:
    """A pipe's output, bounded: its first `cap` bytes (keep="head") or its last (keep="tail")."""

    def __init__(self, cap: int, keep: str) -> None:
        self.cap = cap
        self.keep = keep
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.truncated = False

    def add(self, data: bytes) -> bool:
        """Keep `data`; False once a head is full (stop reading)."""
        if self.keep == "head":
            room = self.cap - self.size
            if len(data) > room:
                data = data[:room]
                self.truncated = True
            if data:
                self.chunks.append(data)
                self.size += len(data)
            return not self.truncated
        self.chunks.append(data)
        self.size += len(data)
        while self.size - len(self.chunks[0]) >= self.cap:  # whole old chunks out, a ring
            self.size -= len(self.chunks.popleft())
            self.truncated = True
        return True

    def value(self) -> bytes:
        data = b"".join(self.chunks)
        if len(data) > self.cap:
            data = data[-self.cap :]
            self.truncated = True
        return data


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int | None  # None: it did not finish (timed out) or could not be started
    stdout: bytes = b""
    stderr: bytes = b""
    seconds: float = 0.0
    timed_out: bool = False
    error: str | None = None  # could not start: "not found", "permission denied", ...
    truncated: bool = False  # output over MAX_OUTPUT: cut (keep="head": the command was stopped there)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    def failure(self) -> str:
        """One line saying how it failed: 'timed out after 5 s', 'not found', or its stderr."""
        name = os.path.basename(self.argv[0]) if self.argv else "?"
        if self.timed_out:
            return f"{name} timed out after {self.seconds:.0f} s"
        if self.truncated and self.rc is not None and self.rc < 0:
            return f"{name} printed more than {MAX_OUTPUT // (1024 * 1024)} MiB and was stopped"
        if self.error:
            return f"{name}: {self.error}"
        first = next((line.strip() for line in self.err.splitlines() if line.strip()), "")
        if not first:
            first = next((line.strip() for line in self.out.splitlines() if line.strip()), "")
        return f"{name} exited with {self.rc}" + (f": {first[:300]}" if first else "")


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: float
    is_dir: bool
    is_file: bool
    is_socket: bool
    mode: int
    uid: int
    ctime: float | None = None  # inode change time: when a socket file was made


@dataclass(frozen=True)
class ProcStat:
    """What /proc/PID/stat says of a process right now."""

    state: str  # R, S, D, Z, T, ...
    cpu_ticks: int  # utime + stime, in clock ticks
    ticks_per_s: int


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    comm: str
    cwd: str | None  # None when we may not look (another user's process)
    exe: str | None
    start_time: float | None  # wall clock


class Host(ABC):
    """The machine a run lives on. Paths are that machine's paths."""

    name: str
    local: bool = False  # this machine: diagnose's own Python and packages are usable there

    @abstractmethod
    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        """Run a command; `env` entries update the environment (None removes a variable). Output
        over MAX_OUTPUT: keep="head" stops the command there, keep="tail" keeps its last bytes."""

    @abstractmethod
    def stat(self, path: str) -> FileStat | None:
        """None when the path does not exist; PermissionError when it may not be looked at."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names in a directory ([] when it is missing or unreadable)."""

    @abstractmethod
    def glob(self, pattern: str) -> list[str]:
        """Paths matching a shell pattern (`**` spans directories), sorted."""

    @abstractmethod
    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        """Up to `limit` bytes from `offset` (negative: from the end). Raises OSError."""

    @abstractmethod
    def walk(self, top: str, max_entries: int) -> Iterator[tuple[str, FileStat]]:
        """Every file under `top` with its stat, depth first, at most `max_entries`."""

    @abstractmethod
    def free_bytes(self, path: str) -> int | None:
        """Free space for an unprivileged user on the filesystem holding `path`."""

    @abstractmethod
    def boot_time(self) -> float | None:
        """Wall-clock time the kernel booted (to put dmesg's [seconds] on the clock)."""

    def refresh(self) -> None:
        """Forget what was read so far (a host that keeps answers for one collection): the next
        look sees the machine as it is now. `diagnose watch` calls it before every poll."""
        return None  # most hosts keep nothing: optional, not abstract

    @abstractmethod
    def processes(self) -> list[ProcessInfo]:
        """The process table."""

    @abstractmethod
    def local_path(self, path: str) -> Path:
        """A local file with the same bytes, for the scanner (LocalHost: the path itself)."""

    @abstractmethod
    def environ(self) -> Mapping[str, str]:
        """The environment a user of that machine would have (TMUX_TMPDIR, HOME, PATH)."""

    @abstractmethod
    def uid(self) -> int:
        ...

    @abstractmethod
    def home(self) -> str:
        ...

    def start_dir(self) -> str | None:
        """The folder a command given to this host starts in (a login shell's, an exec hop's);
        None when not known."""
        return None

    def has_program(self, name: str) -> bool:
        """Is `name` a program on this host's PATH (as commands given to it find them)? False
        when the host cannot tell."""
        return False

    def exists(self, path: str) -> bool:
        try:
            return self.stat(path) is not None
        except PermissionError:
            return True

    def clock(self, timeout: float) -> float | None:
        """The host's wall clock now, read there (`date +%s.%N`): the fan-out measures each node's
        offset against this machine's clock with it. None when it cannot be read."""
        result = self.run(["date", "+%s.%N"], timeout)
        if not result.ok:
            return None
        try:
            return float(result.out.strip())
        except ValueError:
            return None

    # /proc of one process. Not abstract: a host that cannot look returns None ("not known").
    # Every one tolerates a process that vanished meanwhile (None).

    def proc_environ(self, pid: int) -> dict[str, str] | None:
        """The environment the process started with (root or its own user only)."""
        return None

    def proc_fds(self, pid: int) -> list[str] | None:
        """Where its open file descriptors lead (paths; sockets and pipes as the kernel names them)."""
        return None

    def proc_cgroup(self, pid: int) -> str | None:
        """Its cgroup: the v2 `0::` path, else the v1 memory controller's."""
        return None

    def proc_stat(self, pid: int) -> ProcStat | None:
        return None

    def proc_stats(self, pids: Sequence[int]) -> dict[int, ProcStat]:
        """proc_stat of several processes at once (a remote host reads them in one go)."""
        found: dict[int, ProcStat] = {}
        for pid in pids:
            st = self.proc_stat(pid)
            if st is not None:
                found[pid] = st
        return found

    def read_heads(self, paths: Sequence[str], limit: int) -> dict[str, bytes]:
        """The first `limit` bytes of each of these that is a regular file we may read (the
        others are left out); a remote host reads them all in one go."""
        found: dict[str, bytes] = {}
        for path in paths:
            try:
                st = self.stat(path)
                if st is None or not st.is_file:  # never open a FIFO or device planted among them
                    continue
                found[path] = self.read_bytes(path, limit)
            except OSError:
                continue
        return found


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# Process groups of commands still running: killed if diagnose exits first (an error, Ctrl-C),
# since a group of its own does not get the terminal's hangup.
_RUNNING: set[int] = set()


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_RUNNING):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _drain(proc: subprocess.Popen[bytes], out: _Kept, err: _Kept, deadline: float) -> str:
    """Read both pipes until they close ("eof"), the deadline ("timeout") or a kept head is full ("cap")."""
    with selectors.DefaultSelector() as selector:
        for pipe, kept in ((proc.stdout, out), (proc.stderr, err)):
            if pipe is not None and not pipe.closed:
                selector.register(pipe, selectors.EVENT_READ, kept)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            for key, _events in selector.select(min(left, 1.0)):
                data = os.read(key.fd, _READ)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                if not key.data.add(data):
                    return "cap"
    return "eof"


def _reap(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The exit status, or None if it has not exited by the deadline (it is then killed)."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.kill()
        proc.wait()
        return None


def cgroup_of(text: str) -> str | None:
    """The cgroup a /proc/PID/cgroup text names: the unified (v2) `0::/path` line, else the v1
    memory controller's line (`4:memory:/path`), which is where the OOM killer's memcg points."""
    unified = memory = None
    for line in text.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "" and path:
            unified = path
        elif "memory" in controllers.split(",") and path:
            memory = path
    # Hybrid hosts list `0::/` beside the v1 controllers: the memory line is the one that says where.
    if unified and (unified != "/" or memory is None):
        return unified
    return memory


def _ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def run_command(argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
                keep: str = "head", stdin: bytes | None = None) -> CommandResult:
    """Run a program on this machine in its own process group, killed with its group at the
    time limit; output bounded (MAX_OUTPUT, keep="head" or "tail"); `stdin`, when given, is
    written to it (from a thread, so a program that answers before reading all of it cannot
    block us)."""
    args = tuple(argv)
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    # Commands run with C messages so parsers see the words they expect.
    full_env.setdefault("LC_ALL", "C")
    started = time.monotonic()
    if timeout <= 0:
        return CommandResult(args, None, seconds=0.0, timed_out=True)
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=full_env,
            start_new_session=True,  # its own process group, so a timeout can kill all of it
        )
    except FileNotFoundError:
        return CommandResult(args, None, seconds=time.monotonic() - started, error="not found")
    except PermissionError:
        return CommandResult(args, None, seconds=time.monotonic() - started, error="permission denied")
    except OSError as exc:
        return CommandResult(args, None, seconds=time.monotonic() - started, error=exc.strerror or str(exc))
    _RUNNING.add(proc.pid)
    if stdin is not None:
        _feed(proc, stdin)
    out, err = _Kept(MAX_OUTPUT, keep), _Kept(MAX_OUTPUT, "head")
    try:
        # Read as it comes, never all of it at once: 1 GB of dmesg cost 6 GB of memory.
        finished = _drain(proc, out, err, started + timeout)
        if finished == "cap":
            _kill_group(proc)  # its start is what we keep: no need to let it go on
            _drain(proc, out, err, time.monotonic() + 1.0)
        elif finished == "timeout":
            _kill_group(proc)
            # A grandchild that left the group may still hold the pipes; do not wait long on it.
            _drain(proc, out, err, time.monotonic() + 1.0)
        rc = _reap(proc, started + timeout if finished == "eof" else time.monotonic() + 1.0)
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        _RUNNING.discard(proc.pid)
    _kill_group(proc)  # leftovers of a command that exited but left children behind
    truncated = out.truncated or err.truncated
    stdout, stderr = out.value(), err.value()
    if rc is None or finished == "timeout":
        return CommandResult(args, None, stdout, stderr, time.monotonic() - started, timed_out=True,
                             truncated=truncated)
    return CommandResult(args, rc, stdout, stderr, time.monotonic() - started, truncated=truncated)


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    import threading

    def write() -> None:
        pipe = proc.stdin
        if pipe is None:
            return
        with contextlib.suppress(OSError, ValueError):  # it exited (or closed its stdin) first
            pipe.write(data)
        with contextlib.suppress(OSError, ValueError):
            pipe.close()

    threading.Thread(target=write, name="diagnose-stdin", daemon=True).start()


class LocalHost(Host):
    """This machine."""

    local = True

    def __init__(self) -> None:
        self.name = socket.gethostname()

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str | None] | None = None,
            keep: str = "head") -> CommandResult:
        return run_command(argv, timeout, env, keep)

    def stat(self, path: str) -> FileStat | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise PermissionError(exc.errno, exc.strerror, path) from None
            return None
        return FileStat(st.st_size, st.st_mtime, stat_module.S_ISDIR(st.st_mode), stat_module.S_ISREG(st.st_mode),
                        stat_module.S_ISSOCK(st.st_mode), st.st_mode, st.st_uid, st.st_ctime)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def glob(self, pattern: str) -> list[str]:
        import glob as glob_module

        return sorted(glob_module.glob(pattern, recursive=True))

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        # Opened non-blocking and checked before reading: a FIFO would block the open (and the
        # read) until a writer came, a device would never end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            os.close(fd)
            raise
        if not stat_module.S_ISREG(mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        with open(fd, "rb") as handle:
            if offset < 0:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size + offset))
            elif offset:
                handle.seek(offset)
            return handle.read(limit)

    def walk(self, top: str, max_entries: int) -> Iterator[tuple[str, FileStat]]:
        count = 0
        stack = [top]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in sorted(entries, key=lambda e: e.name, reverse=True):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat_module.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                    continue
                if not stat_module.S_ISREG(st.st_mode):
                    continue
                yield entry.path, FileStat(st.st_size, st.st_mtime, False, True, False, st.st_mode, st.st_uid)
                count += 1
                if count >= max_entries:
                    return

    def free_bytes(self, path: str) -> int | None:
        probe = path
        while probe and not os.path.exists(probe):
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        try:
            st = os.statvfs(probe or "/")
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def boot_time(self) -> float | None:
        try:
            with open("/proc/stat", "rb") as handle:
                for line in handle:
                    if line.startswith(b"btime "):
                        return float(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def processes(self) -> list[ProcessInfo]:
        boot = self.boot_time()
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        found: list[ProcessInfo] = []
        try:
            names = os.listdir("/proc")
        except OSError:
            return found
        for name in names:
            if not name.isdigit():
                continue
            base = f"/proc/{name}"
            try:
                with open(f"{base}/cmdline", "rb") as handle:
                    raw = handle.read(64 * 1024)
                with open(f"{base}/stat", "rb") as handle:
                    stat_line = handle.read().decode("utf-8", errors="replace")
            except OSError:
                continue  # gone meanwhile
            comm, ppid, start = parse_stat(stat_line, boot, ticks)
            cwd = exe = None
            try:
                cwd = os.readlink(f"{base}/cwd")
                exe = os.readlink(f"{base}/exe")
            except OSError:
                pass
            argv = tuple(part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part)
            found.append(ProcessInfo(int(name), ppid, argv, comm, cwd, exe, start))
        return found

    def proc_environ(self, pid: int) -> dict[str, str] | None:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                raw = handle.read(1024 * 1024)
        except OSError:
            return None
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep and key:
                env[key.decode("utf-8", errors="replace")] = value.decode("utf-8", errors="replace")
        return env

    def proc_fds(self, pid: int) -> list[str] | None:
        base = f"/proc/{pid}/fd"
        try:
            names = os.listdir(base)
        except OSError:
            return None
        targets = []
        for name in names[:4096]:  # a process with a million fds must not cost a million readlinks
            with contextlib.suppress(OSError):
                targets.append(os.readlink(f"{base}/{name}"))
        return targets

    def proc_cgroup(self, pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/cgroup", "rb") as handle:
                text = handle.read(64 * 1024).decode("utf-8", errors="replace")
        except OSError:
            return None
        return cgroup_of(text)

    def proc_stat(self, pid: int) -> ProcStat | None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                line = handle.read(4096).decode("utf-8", errors="replace")
        except OSError:
            return None
        fields = line.rpartition(")")[2].split()  # comm may hold spaces and parentheses
        try:
            return ProcStat(fields[0], int(fields[11]) + int(fields[12]), _ticks())
        except (IndexError, ValueError):
            return None

    def local_path(self, path: str) -> Path:
        return Path(path)

    def environ(self) -> Mapping[str, str]:
        return dict(os.environ)

    def uid(self) -> int:
        return os.getuid()

    def home(self) -> str:
        try:
            return pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return os.path.expanduser("~")

    def has_program(self, name: str) -> bool:
        return shutil.which(name) is not None


def parse_stat(line: str, boot: float | None, ticks: int) -> tuple[str, int, float | None]:
    """(comm, ppid, start time) of a /proc/PID/stat line, here or read on another host. comm may
    hold spaces and parentheses: the line is split at its last ')'."""
    left, _, right = line.rpartition(")")
    comm = left.partition("(")[2]
    fields = right.split()
    try:
        return comm, int(fields[1]), boot + int(fields[19]) / ticks if boot is not None else None
    except (IndexError, ValueError):
        return comm, 0, None
