"""Real OpenSSH servers and a real `pct exec`-like hop for the remote tests.

`Sshd` is Debian's /usr/sbin/sshd on a free loopback port, with a host key, a user key and
an authorized_keys file it generates, a known_hosts file and an ssh client config (`-F`) it
writes: the real ~/.ssh is never read or touched. `Container` stands in for a Proxmox LXC
container: a process in new pid and mount namespaces (unshare), with its own /proc, its own
/tmp (a tmpfs: tmux sockets there are the container's) and a workspace folder of the test bind
-mounted at /mnt/workspace; `fake-pct exec ID -- CMD` (a real script) runs CMD inside it with
nsenter, as `pct exec` runs it inside a container. Everything is stopped and removed by pid.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
SSHD_REASON = "needs Debian's openssh-server (apt-get install openssh-server) and root"
NS_REASON = "needs root and unshare/nsenter (util-linux) for the container stand-in"
INSIDE = "/mnt/workspace"  # where the container sees the test's workspace


def have_sshd() -> bool:
    return SSHD.exists() and os.geteuid() == 0 and shutil.which("ssh") is not None and shutil.which("ssh-keygen") is not None


def have_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("nsenter") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "diagnose-test", "-f", str(path)], check=True,
                   timeout=30)
    return path.with_suffix(".pub").read_text().split()[1]


class Sshd:
    """sshd -D on 127.0.0.1:PORT (or an address inside network namespace `netns`), accepting
    one generated key for root."""

    def __init__(self, folder: Path, address: str = "127.0.0.1", netns: str | None = None,
                 wrap: Sequence[str] = (), session_env: Mapping[str, str] | None = None) -> None:
        """`wrap`: words put before sshd (a private mount namespace: a node's own files);
        `session_env`: SetEnv for every session (a node whose clock is off, through faketime)."""
        self.folder = folder
        self.address = address
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host_key = folder / "host_ed25519"
        self.user_key = folder / "user_ed25519"
        host_public = keygen(self.host_key)
        keygen(self.user_key)
        (folder / "authorized_keys").write_text(self.user_key.with_suffix(".pub").read_text())
        self.known_hosts = folder / "known_hosts"
        self.known_hosts.write_text(f"[{address}]:{self.port} ssh-ed25519 {host_public}\n")
        self.config = folder / "sshd_config"
        self.config.write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress {address}
            HostKey {self.host_key}
            AuthorizedKeysFile {folder}/authorized_keys
            PidFile {folder}/sshd.pid
            StrictModes no
            UsePAM no
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PermitRootLogin prohibit-password
            MaxSessions 20
            LogLevel ERROR
            """))
        if session_env:
            with self.config.open("a") as conf:
                conf.write("SetEnv " + " ".join(f"{k}={v}" for k, v in session_env.items()) + "\n")
        self.client_config = folder / "ssh_config"
        self.client_config.write_text(self._client(self.user_key, self.known_hosts))
        self.made_run_dir = False
        if not Path("/run/sshd").exists():  # sshd's privilege-separation folder; removed if we made it
            Path("/run/sshd").mkdir(mode=0o755, parents=True)
            self.made_run_dir = True
        self.log = open(folder / "sshd.log", "wb")  # noqa: SIM115  (closed in stop)
        inside = ["ip", "netns", "exec", netns] if netns else []
        self.proc = subprocess.Popen([*inside, *wrap, str(SSHD), "-D", "-e", "-f", str(self.config)], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex((address, self.port)) == 0:
                    break
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
            time.sleep(0.05)

    def _client(self, key: Path, known: Path) -> str:
        return textwrap.dedent(f"""\
            Host *
              HostName {self.address}
              Port {self.port}
              User root
              IdentityFile {key}
              IdentitiesOnly yes
              IdentityAgent none
              UserKnownHostsFile {known}
              GlobalKnownHostsFile /dev/null
              StrictHostKeyChecking yes
              LogLevel ERROR
            """)

    @property
    def target(self) -> str:
        return f"root@{self.address}:{self.port}"

    def client_config_with(self, name: str, key: Path | None = None, known: Path | None = None, extra: str = "") -> Path:
        """Another client config: another key, another known_hosts, more options for the host."""
        path = self.folder / name
        path.write_text(self._client(key or self.user_key, known or self.known_hosts) + extra)
        return path

    def toml(self, exec_prefix: str | None = None, extra: str = "", client_config: Path | None = None) -> str:
        """A diagnose.toml [host] table for this server."""
        lines = ["[host]", f'target = "{self.target}"', f'ssh_config = "{client_config or self.client_config}"']
        if exec_prefix:
            lines.append(f"exec = {exec_prefix!r}")
        return "\n".join(lines) + "\n" + extra

    def sessions(self) -> list[int]:
        """Pids of sshd's per-connection processes (its children)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) == self.proc.pid:
                        found.append(int(entry.name))
        return found

    def stop(self) -> None:
        for pid in self.sessions():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()
        if self.made_run_dir:
            with contextlib.suppress(OSError):
                Path("/run/sshd").rmdir()


FAKE_PCT = """\
#!/bin/sh
# fake-pct exec ID -- CMD...: run CMD inside "container" ID (its pid and mount namespaces: its own
# /proc, /tmp and /mnt/workspace), as Proxmox's `pct exec ID -- CMD` runs it inside an LXC container.
if [ "$1" != exec ]; then echo "fake-pct: only 'exec' is supported" >&2; exit 2; fi
id=$2; shift 2
[ "$1" = -- ] && shift
pid=$(cat "{folder}/$id.pid" 2>/dev/null)
if [ -z "$pid" ] || [ ! -e "/proc/$pid" ]; then
  echo "Configuration file 'nodes/test/lxc/$id.conf' does not exist" >&2; exit 2
fi
exec nsenter -t "$pid" -p -m --wd=/ -- "$@"
"""


class Container:
    """A stand-in for LXC container `cid`: new pid and mount namespaces, private /tmp, the
    workspace at /mnt/workspace; `pct` is the path of its fake-pct script."""

    def __init__(self, folder: Path, workspace: Path, cid: str = "200") -> None:
        self.folder = folder
        self.cid = cid
        self.workspace = workspace
        folder.mkdir(parents=True, exist_ok=True)
        self.pct = folder / "fake-pct"
        self.pct.write_text(FAKE_PCT.replace("{folder}", str(folder)))
        self.pct.chmod(0o755)
        # The container's /tmp is its own (a tmpfs). A checkout under /tmp (a CI clone there) would
        # vanish behind it, and with it the interpreter and code a test runs inside: it is set
        # aside first and bound back at its own path, as a host's bind mount would be.
        from tests.support.paths import REPO

        repo = shlex.quote(str(REPO))
        under_tmp = str(REPO) == "/tmp" or str(REPO).startswith("/tmp/")
        keep = f"mkdir /mnt/.repo && mount --bind {repo} /mnt/.repo && " if under_tmp else ""
        back = f"mkdir -p {repo} && mount --bind /mnt/.repo {repo} && " if under_tmp else ""
        init = ("mount --make-rprivate / && mount -t tmpfs diagnose-ct /mnt && mkdir /mnt/workspace && "
                f"mount --bind {shlex.quote(str(workspace))} /mnt/workspace && {keep}"
                f"mount -t tmpfs diagnose-ct-tmp /tmp && {back}"
                "echo ready && exec sleep 100000 >/dev/null")
        self.proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount", "--mount-proc", "sh", "-c", init],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # its mounts are in place once it says so
        self.proc.stdout.close()
        if line.strip() != b"ready":
            self.proc.kill()
            raise AssertionError("the container stand-in did not start")
        self.init_pid = self._child_of(self.proc.pid)
        self.namespace = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        (folder / f"{cid}.pid").write_text(str(self.init_pid))

    @staticmethod
    def _child_of(pid: int) -> int:
        deadline = time.time() + 10
        while time.time() < deadline:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
            time.sleep(0.02)
        raise AssertionError("unshare did not fork the container's init")

    @property
    def exec_prefix(self) -> str:
        return f"{self.pct} exec {self.cid} --"

    def run(self, *argv: str, check: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """A command inside the container, waited for."""
        return subprocess.run([str(self.pct), "exec", self.cid, "--", *argv], capture_output=True, text=True,
                              check=check, timeout=60, **kwargs)  # type: ignore[call-overload]

    def start(self, *argv: str, **kwargs: object) -> subprocess.Popen[bytes]:
        """A command inside the container, left running (ended with the container)."""
        return subprocess.Popen([str(self.pct), "exec", self.cid, "--", *argv], **kwargs)  # type: ignore[call-overload]

    def pids(self) -> list[int]:
        """Pids (as this machine numbers them) of every process inside."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "pid") == self.namespace:
                        found.append(int(entry.name))
        return found

    def stop(self) -> None:
        # The init of a pid namespace takes every process inside with it when it dies.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.init_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        deadline = time.time() + 10
        while self.pids() and time.time() < deadline:
            time.sleep(0.05)


# ---------------------------------------------------------------- diagnosing from here and from there


def diagnose_remote(args: list[str], cwd: Path, timeout: float = 180) -> tuple[int, dict[str, object], str]:
    """The real CLI on this machine, `--format json`: (exit code, parsed stdout, stderr)."""
    import json

    from tests.support.cli import run_cli

    result = run_cli([*args, "--format", "json"], cwd=cwd, timeout=timeout)
    assert result.returncode in (0, 1), f"exit {result.returncode}: {result.stderr}"
    return result.returncode, json.loads(result.stdout), result.stderr


def diagnose_there(box: Container, args: list[str]) -> tuple[int, dict[str, object], str]:
    """The same diagnose run *inside* the container, as a user logged in there would run it
    (from /root, so its paths are shown absolute like a remote run shows them)."""
    import json
    import sys

    from tests.support.paths import REPO

    env = [f"PYTHONPATH={os.environ.get('PYTHONPATH', REPO)}",
           f"DIAGNOSE_CACHE_DIR={os.environ.get('DIAGNOSE_CACHE_DIR', REPO / '.pytest_cache' / 'diagnose-cache')}"]
    result = box.run("env", *env, "sh", "-c", 'cd /root && exec "$@"', "sh", sys.executable, "-m", "diagnose", *args,
                     "--format", "json", check=False)
    assert result.returncode in (0, 1), f"exit {result.returncode} there: {result.stderr}"
    return result.returncode, json.loads(result.stdout), result.stderr


def own_causes(data: dict[str, object], log: str | None = None) -> list[tuple[object, ...]]:
    """What must be equal between two diagnoses of one run: the causes that rest on the run
    (not context; host events only when attributed to the run) with every piece of evidence;
    with `log`, only those resting on that log alone (this shared machine's kernel log gains
    other users' OOM kills between two diagnoses, and one killed after the run's last write is
    tied to the run by name and time)."""
    found = []
    for cause in data["causes"]:  # type: ignore[attr-defined]
        if cause["role"] == "context" or cause.get("attribution") not in (None, "own", "n/a"):
            continue
        evidence = tuple((e.get("source"), e.get("line"), e.get("text"), e.get("time")) for e in cause["evidence"])
        if log is not None and not all(source == log for source, _l, _t, _m in evidence):
            continue
        found.append((cause["id"], cause["title"], cause["severity"], evidence))
    return found


def ssh_masters(port: int) -> list[int]:
    """Pids of ssh ControlMasters (`ssh -M ... -p PORT`) to this port still alive."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if argv and argv[0].endswith(b"ssh") and b"-M" in argv and str(port).encode() in argv:
                    found.append(int(entry.name))
    return found
