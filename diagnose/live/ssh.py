"""One OpenSSH connection per invocation, and remote commands that can never run anything else.

`--host [USER@]HOST[:PORT]` with an optional exec prefix (`pct exec 200 --`, `docker exec -i C`,
`kubectl exec -i POD --`, `sudo -u USER`): every remote command is an argument list, joined
with shlex once for the remote login shell; a prefix that ends in `-c` (`bash -c`) gets the
command as one word, joined once more. A run id or a path is always an argument, never text
of a script, so nothing in it can run.

The connection is one ControlMaster (`ssh -M -N -f`) whose socket lives in a private 0700
folder; every operation is a client of it, `BatchMode=yes` (never a prompt), the user's
~/.ssh/config and known_hosts as they are (host-key checking is never turned off). Clients
carry `ProxyCommand=false`: when the master is gone they fail at once instead of opening a
connection of their own, so a dropped connection is noticed once and then costs nothing. The
master is closed with `ssh -O exit` at exit (and, if diagnose is killed, leaves by itself
after ControlPersist seconds idle).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diagnose.errors import DiagnoseError
from diagnose.live.hosts import CommandResult, run_command

CONNECT_TIMEOUT = 10.0
PERSIST = 60  # seconds a master left behind by a killed diagnose stays, idle
PARALLEL = 6  # sessions at once (sshd's MaxSessions is 10 by default)
_HOST = re.compile(r"^[A-Za-z0-9_.%-]+$")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")  # with a zone: fe80::1%eth0
_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9]*=[^\n\r\0]*$")
# ssh's own words for what went wrong, in the order they are checked.
_CAUSES = (
    (re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key for .* has changed", re.I), "host key changed"),
    (re.compile(r"Host key verification failed|No \S+ host key is known|host key is not known", re.I),
     "host key verification failed"),
    (re.compile(r"Permission denied \(([^)]*)\)", re.I), "permission denied"),
    (re.compile(r"Could not resolve hostname", re.I), "could not resolve the host name"),
    (re.compile(r"Connection refused", re.I), "connection refused"),
    (re.compile(r"timed out", re.I), "connection timed out"),
    (re.compile(r"No route to host|Network is unreachable", re.I), "host unreachable"),
    (re.compile(r"Connection closed|Connection reset|kex_exchange_identification", re.I), "connection closed by the host"),
)


@dataclass(frozen=True)
class Target:
    """[USER@]HOST[:PORT], HOST a name, an ssh_config alias, an IPv4 address or [IPv6]."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port is not None else self.host
        return (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port is not None else "")


def parse_target(text: str) -> Target:
    """The target of --host / [host] target; a usage error (exit 2) for anything else."""
    from diagnose.evidence.safetext import visible

    raw = text.strip()
    user: str | None = None
    if "@" in raw:
        user, _, raw = raw.rpartition("@")
        if not _USER.match(user):
            raise DiagnoseError(f"--host {visible(text)!r}: {visible(user)!r} is not a user name")
    port: int | None = None
    if raw.startswith("["):
        host, bracket, rest = raw[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise DiagnoseError(f"--host {visible(text)!r}: expected [IPV6]:PORT")
        port_text = rest[1:] if rest else None
    elif raw.count(":") == 1:
        host, _, port_text = raw.partition(":")
    else:
        host, port_text = raw, None  # a bare IPv6 address, or no port
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise DiagnoseError(f"--host {visible(text)!r}: {visible(port_text)!r} is not a port number")
        port = int(port_text)
    if not host or host.startswith("-") or not (_HOST.match(host) or (":" in host and _IPV6.fullmatch(host))):
        raise DiagnoseError(f"--host {visible(text)!r}: expected [USER@]HOST[:PORT] (a host name, an address, "
                            "or an alias of your ssh config)")
    return Target(host, user, port)


def parse_exec(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """The exec prefix as words: `pct exec 200 --` -> (pct, exec, 200, --)."""
    if text is None:
        return ()
    if not isinstance(text, str):
        return tuple(text)
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise DiagnoseError(f"--exec {text!r}: {exc}") from None
    return words


def remote_command(prefix: Sequence[str], argv: Sequence[str]) -> str:
    """The one string ssh hands to the remote login shell: the prefix and the command, each word
    quoted (shlex.join); a prefix ending in `-c` takes the command as one word, quoted once more."""
    if not argv:
        raise ValueError("empty remote command")
    words = [*prefix, shlex.join(argv)] if prefix and prefix[-1] == "-c" else [*prefix, *argv]
    return shlex.join(words)


@dataclass(frozen=True)
class Remote:
    """Where a remote run lives and how it is reached (from --host/--exec and the [host] table)."""

    target: Target
    exec_prefix: tuple[str, ...] = ()
    options: tuple[str, ...] = ()  # ssh -o KEY=VALUE
    config_file: str | None = None  # ssh -F FILE
    connect_timeout: float = CONNECT_TIMEOUT
    scan_timeout: float = 300.0

    def describe(self) -> str:
        return str(self.target) + (f" ({shlex.join(self.exec_prefix)})" if self.exec_prefix else "")


def remote_for(target: str, table: Mapping[str, object], exec_prefix: str | None = None) -> Remote:
    """How to reach TARGET: the exec prefix (--exec, else the table's), ssh options, config file
    and time limits of the config's [host] table (one machine's, or every node's of --hosts)."""
    options = table.get("ssh_options") or ()
    config_file = table.get("ssh_config")
    return Remote(
        target=parse_target(target),
        exec_prefix=parse_exec(exec_prefix if exec_prefix is not None else table.get("exec")),  # type: ignore[arg-type]
        options=check_options(options, "[host] ssh_options"),  # type: ignore[arg-type]
        config_file=str(config_file) if config_file else None,
        connect_timeout=float(table.get("connect_timeout") or CONNECT_TIMEOUT),  # type: ignore[arg-type]
        scan_timeout=float(table.get("scan_timeout") or 300.0),  # type: ignore[arg-type]
    )


def check_options(options: Sequence[str], where: str) -> tuple[str, ...]:
    for option in options:
        if not isinstance(option, str) or not _OPTION.match(option):
            raise DiagnoseError(f"{where}: ssh option {option!r}: expected KEY=VALUE (as for ssh -o)")
    return tuple(options)


@dataclass
class Traffic:
    """What crossed the connection: bytes received (stdout and stderr of every remote command,
    compressed where the remote side compressed them) and sent (their input), and how often."""

    received: int = 0
    sent: int = 0
    commands: int = 0
    seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, received: int, sent: int, seconds: float) -> None:
        with self.lock:
            self.received += received
            self.sent += sent
            self.commands += 1
            self.seconds += seconds


class ConnectionLost(ConnectionError):
    """The connection to the remote host is gone: what is left to collect becomes gaps."""


def explain(target: Target, stderr: str, timeout: float | None = None) -> str:
    """One line saying why ssh could not connect, and what to do about it."""
    text = stderr.strip()
    for pattern, cause in _CAUSES:
        found = pattern.search(text)
        if found is None:
            continue
        if cause in ("host key verification failed", "host key changed"):
            port = f"-p {target.port} " if target.port else ""
            if cause == "host key changed":
                return (f"{target}: host key changed (known_hosts holds another key for it; if the host was "
                        f"reinstalled, check its new fingerprint, then: ssh-keygen -R {target.host})")
            return (f"{target}: host key verification failed (add it to known_hosts: ssh-keyscan {port}{target.host} "
                    ">> ~/.ssh/known_hosts, after checking its fingerprint)")
        if cause == "permission denied":
            methods = found.group(1)
            return (f"{target}: permission denied ({methods}): no key was accepted; diagnose never prompts "
                    "(BatchMode=yes): load the key into ssh-agent or name it with IdentityFile")
        if cause == "connection timed out" and timeout is not None:
            return f"{target}: connection timed out after {timeout:.0f} s"
        if cause == "connection refused":
            return f"{target}: connection refused (no sshd listening on port {target.port or 22}?)"
        return f"{target}: {cause}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{target}: ssh failed" + (f": {first[:300]}" if first else "")


class Connection:
    """The ControlMaster and its clients. Thread-safe: collectors share it."""

    def __init__(self, remote: Remote, folder: Path) -> None:
        self.remote = remote
        self.folder = folder
        self.socket = folder / "cm"
        self.traffic = Traffic()
        self.lost: str | None = None
        self._gate = threading.BoundedSemaphore(PARALLEL)
        self._opened = False
        self._master_pid: int | None = None

    # -- argv

    def _base(self) -> list[str]:
        remote = self.remote
        # Given first, these win over the user's config (ssh keeps the first value it sees): a
        # RemoteCommand or forwardings set there for the host would break (or bind ports for) us.
        argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(remote.connect_timeout))}",
                "-o", f"ControlPath={self.socket}", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-o", "RemoteCommand=none", "-o", "ClearAllForwardings=yes", "-o", "PermitLocalCommand=no"]
        if remote.config_file:
            argv += ["-F", remote.config_file]
        for option in remote.options:
            argv += ["-o", option]
        if remote.target.port is not None:
            argv += ["-p", str(remote.target.port)]
        if remote.target.user:
            argv += ["-l", remote.target.user]
        return argv

    def _client(self, command: str) -> list[str]:
        return [*self._base(), "-o", "ControlMaster=no", "-o", "ProxyCommand=false", "--", self.remote.target.host,
                command]

    # -- the master

    def open(self) -> None:
        """Start the master; DiagnoseError (one line, exit 2) when it cannot connect."""
        argv = [*self._base(), "-M", "-N", "-f", "-o", "ControlMaster=yes", "-o", f"ControlPersist={PERSIST}",
                "--", self.remote.target.host]
        log = self.folder / "master.err"
        limit = self.remote.connect_timeout + 20  # authentication (an agent, a slow host) after the TCP connect
        started = time.monotonic()
        with open(log, "wb") as err:
            try:
                # -f: once authenticated, ssh forks the master into the background and this exits.
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            except FileNotFoundError:
                raise DiagnoseError("--host: the ssh program (OpenSSH client) is not installed") from None
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise DiagnoseError(f"{self.remote.target}: connection timed out after {limit:.0f} s") from None
        stderr = log.read_text(errors="replace")
        if rc != 0:
            raise DiagnoseError(explain(self.remote.target, stderr, self.remote.connect_timeout))
        self._opened = True
        atexit.register(self.close)
        self.connect_seconds = time.monotonic() - started
        check = run_command([*self._base(), "-O", "check", "--", self.remote.target.host], 10.0)
        found = re.search(r"pid=(\d+)", check.err + check.out)
        self._master_pid = int(found.group(1)) if found else None

    @property
    def master_pid(self) -> int | None:
        return self._master_pid

    def alive(self) -> bool:
        if not self._opened:
            return False
        check = run_command([*self._base(), "-O", "check", "--", self.remote.target.host], 5.0)
        return check.ok

    def close(self) -> None:
        """`ssh -O exit`; the master's pid is killed if it does not go (it is ours)."""
        if not self._opened:
            return
        self._opened = False
        run_command([*self._base(), "-O", "exit", "--", self.remote.target.host], 5.0)
        pid = self._master_pid
        if pid is not None:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and _is_ssh(pid):
                time.sleep(0.05)
            if _is_ssh(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.socket.unlink()

    # -- commands

    def run(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None, keep: str = "head") -> CommandResult:
        """Run argv (after the exec prefix) remotely; CommandResult of ssh itself: rc 255 and
        error "connection lost" when the connection is gone."""
        args = tuple(argv)
        if self.lost is not None:
            return CommandResult(args, None, error=self.lost)
        started = time.monotonic()
        if not self._gate.acquire(timeout=max(0.0, timeout)):
            return CommandResult(args, None, seconds=timeout, timed_out=True)
        try:
            left = timeout - (time.monotonic() - started)
            command = remote_command(self.remote.exec_prefix, args)
            result = run_command(self._client(command), left, keep=keep, stdin=stdin)
        finally:
            self._gate.release()
        self.traffic.add(len(result.stdout) + len(result.stderr), len(stdin or b"") + len(command), result.seconds)
        _trace(args, result.seconds, len(result.stdout) + len(result.stderr))
        if result.rc == 255 and not self.alive():
            self.lost = f"connection to {self.remote.target} lost"
            return CommandResult(args, None, result.stdout, result.stderr, result.seconds, error=self.lost)
        return result

    def stream(self, argv: Sequence[str], timeout: float, stdin: bytes | None = None, chunk: int = 1 << 20,
               stderr: bytearray | None = None) -> Iterator[bytes]:
        """Run argv remotely and yield its stdout as it comes (never all of it in memory), until
        it ends or the time limit (TimeoutError); ConnectionLost when the connection drops.
        Its stderr goes (bounded) into `stderr`."""
        import selectors

        args = tuple(argv)
        if self.lost is not None:
            raise ConnectionLost(self.lost)
        started = time.monotonic()
        deadline = started + timeout
        if not self._gate.acquire(timeout=max(0.0, timeout)):
            raise TimeoutError(f"no free session within {timeout:.0f} s")
        command = remote_command(self.remote.exec_prefix, args)
        received = 0
        stderr = stderr if stderr is not None else bytearray()
        proc = subprocess.Popen(self._client(command), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            if stdin is not None:
                from diagnose.live.hosts import _feed

                _feed(proc, stdin)
            with selectors.DefaultSelector() as selector:
                assert proc.stdout is not None and proc.stderr is not None
                selector.register(proc.stdout, selectors.EVENT_READ, "out")
                selector.register(proc.stderr, selectors.EVENT_READ, "err")
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"no answer within {timeout:.0f} s")
                    for key, _events in selector.select(min(left, 1.0)):
                        data = os.read(key.fd, chunk)
                        if not data:
                            selector.unregister(key.fileobj)
                            continue
                        received += len(data)
                        if key.data == "err":
                            if len(stderr) < 1 << 20:
                                stderr += data
                            continue
                        yield data
            try:
                rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"no end within {timeout:.0f} s") from None
            if rc == 255 and not self.alive():
                self.lost = f"connection to {self.remote.target} lost"
                raise ConnectionLost(self.lost)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            self._gate.release()
            self.traffic.add(received, len(stdin or b"") + len(command), time.monotonic() - started)
            _trace(args, time.monotonic() - started, received)

    connect_seconds: float = 0.0


def _trace(argv: Sequence[str], seconds: float, received: int) -> None:
    """DIAGNOSE_SSH_TRACE=1: one line per remote command on stderr (what it was, how long, how much)."""
    if not os.environ.get("DIAGNOSE_SSH_TRACE"):
        return
    import sys

    words = list(argv)
    if "-c" in words:  # one of our scripts: name it by its first line of work
        script = words[words.index("-c") + 1]
        body = [line.strip() for line in script.split("printf \"%s\\n\" \"$n\" >&2; ", 1)[-1].splitlines() if line.strip()]
        words = [body[0][:60] if body else "sh", *words[words.index("-c") + 4 :][:4]]
    sys.stderr.write(f"diagnose: ssh {' '.join(words)[:160]} ({seconds:.2f} s, {received:,} B)\n")


def _is_ssh(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "ssh"
    except OSError:
        return False


def nonce() -> str:
    """A marker remote output can hold only by our printing it (unguessable, per command)."""
    return "DGX" + secrets.token_hex(12)


def env_words(env: Mapping[str, str | None] | None) -> list[str]:
    """`env -u NAME NAME=VALUE ...` words for a remote command's environment (LC_ALL=C unless given)."""
    words = ["env"]
    wanted = dict(env or {})
    wanted.setdefault("LC_ALL", "C")
    for key, value in wanted.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"bad environment variable name {key!r}")
        words += ["-u", key] if value is None else [f"{key}={value}"]
    return words
