"""A real single-node Slurm cluster for the tests, started from Debian's packages (slurm-wlm,
slurmdbd, munge, mariadb-server) in a private folder: its own munge key and socket, a MariaDB
on a loopback port holding the accounting database, slurmdbd, slurmctld and slurmd on this
host with generated configs. Nothing is read from or written to /etc/slurm or /run/munge.

Accounting: Slurm 22.05 has no text-file accounting storage any more, and `sacct` for finished
jobs needs slurmdbd, which needs MySQL/MariaDB; so the cluster runs both. Memory limits are
enforced by task/cgroup (ConstrainRAMSpace): a job over its --mem is OOM-killed by the kernel in
its memory cgroup and ends OUT_OF_MEMORY.

`SlurmCluster.start()` returns None with the exact reason when a piece cannot run here; `stop()`
ends every daemon it started (by pid) and removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PROGRAMS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "sbatch", "sacct",
            "scontrol", "sacctmgr", "srun", "scancel")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check, seconds: float, step: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(step)
    return False


class SlurmCluster:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.node = socket.gethostname()
        self.pids: list[int] = []
        self.env = dict(os.environ)
        self.conf = base / "etc" / "slurm.conf"
        self.env["SLURM_CONF"] = str(self.conf)
        self.reason: str | None = None

    # -- helpers

    def run(self, *argv: str, timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {result.returncode}: {result.stderr.strip()[:500]}")
        return result

    def _daemon(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        handle = open(log, "ab")  # noqa: SIM115 - handed to the daemon, closed at stop
        proc = subprocess.Popen(argv, env=self.env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        handle.close()
        self.pids.append(proc.pid)
        return proc

    def _log_tail(self, name: str) -> str:
        path = self.base / "log" / name
        try:
            return path.read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    # -- start / stop

    def start(self) -> str | None:
        """None when the cluster is up, else why it could not start (a skip reason)."""
        missing = [p for p in PROGRAMS if shutil.which(p) is None]
        if missing:
            return f"Slurm test cluster: not installed: {', '.join(missing)} (apt-get install slurm-wlm slurmdbd munge mariadb-server)"
        if os.geteuid() != 0:
            return "Slurm test cluster: needs root (slurmd runs jobs as their users and makes cgroups)"
        if not os.path.isdir("/sys/fs/cgroup/memory") and not os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
            return "Slurm test cluster: no memory cgroup on this machine (task/cgroup enforces --mem)"
        try:
            return self._start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            return f"Slurm test cluster: {exc}"

    def _start(self) -> str | None:
        base = self.base
        for sub in ("etc", "log", "run", "state", "spool", "db", "jobs"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o755)
        # munge: a key and a socket of our own
        key = base / "etc" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        munge_socket = base / "run" / "munge.socket"
        self._daemon(["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
                      f"--pid-file={base / 'run' / 'munged.pid'}", f"--log-file={base / 'log' / 'munged.log'}",
                      f"--seed-file={base / 'run' / 'munge.seed'}"], base / "log" / "munged.out")
        if not _wait(munge_socket.exists, 10):
            return "munged did not start: " + self._log_tail("munged.out") + self._log_tail("munged.log")
        # MariaDB on a loopback port, for slurmdbd
        db_port = _free_port()
        db_socket = base / "run" / "mysqld.sock"
        install = self.run("mariadb-install-db", f"--datadir={base / 'db'}", "--user=root",
                           "--auth-root-authentication-method=normal", "--skip-test-db", timeout=120)
        if install.returncode != 0:
            return f"mariadb-install-db failed: {install.stderr.strip()[-500:]}"
        self._daemon(["mariadbd", "--no-defaults", f"--datadir={base / 'db'}", "--user=root", f"--socket={db_socket}",
                      f"--port={db_port}", "--bind-address=127.0.0.1", f"--pid-file={base / 'run' / 'mysqld.pid'}",
                      "--skip-name-resolve", "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
                      "--performance-schema=OFF"], base / "log" / "mariadbd.log")
        if not _wait(lambda: db_socket.exists() and self.run("mariadb", f"--socket={db_socket}", "-uroot", "-e", "select 1").returncode == 0, 60):
            return "mariadbd did not start: " + self._log_tail("mariadbd.log")
        password = os.urandom(8).hex()
        self.run("mariadb", f"--socket={db_socket}", "-uroot", "-e",
                 f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                 "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;", check=True)
        dbd_port, ctld_port, slurmd_port = _free_port(), _free_port(), _free_port()
        auth = f"AuthType=auth/munge\nAuthInfo=socket={munge_socket}\n"
        dbd_conf = base / "etc" / "slurmdbd.conf"
        dbd_conf.write_text(
            f"{auth}DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
            f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n"
            f"StorageUser=slurm\nStoragePass={password}\nStorageLoc=slurm_acct_db\n"
            f"PidFile={base / 'run' / 'slurmdbd.pid'}\nLogFile={base / 'log' / 'slurmdbd.log'}\nDebugLevel=info\n")
        os.chmod(dbd_conf, 0o600)
        memory = 2000
        (base / "etc" / "cgroup.conf").write_text("CgroupPlugin=autodetect\nConstrainRAMSpace=yes\nConstrainSwapSpace=yes\n"
                                                  "AllowedSwapSpace=0\n")
        self.conf.write_text(
            f"ClusterName=diagtest\nSlurmctldHost={self.node}(127.0.0.1)\nSlurmUser=root\n{auth}"
            f"SlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\n"
            f"StateSaveLocation={base / 'state'}\nSlurmdSpoolDir={base / 'spool'}\n"
            f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}\nSlurmdPidFile={base / 'run' / 'slurmd.pid'}\n"
            f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}\nSlurmdLogFile={base / 'log' / 'slurmd.log'}\n"
            "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
            "JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=1\n"
            f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort={dbd_port}\n"
            # For slurmdbd this names the munge socket (slurm.conf(5)): AuthInfo is not used there.
            f"AccountingStoragePass={munge_socket}\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU_Memory\n"
            "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n"
            "DefMemPerNode=200\nMinJobAge=3600\nKillWait=2\nOverTimeLimit=0\nInactiveLimit=0\nMailProg=/bin/true\n"
            "SlurmctldDebug=info\nSlurmdDebug=info\nReturnToService=2\n"
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs=2 RealMemory={memory} State=UNKNOWN\n"
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1\n"
            "PartitionName=urgent Nodes=ALL Default=NO MaxTime=INFINITE State=UP PriorityTier=10\n")
        self._daemon(["slurmdbd", "-D"], base / "log" / "slurmdbd.out")
        if not _wait(lambda: self.run("sacctmgr", "-n", "list", "cluster").returncode == 0, 60, 0.5):
            return "slurmdbd did not start: " + self._log_tail("slurmdbd.out") + self._log_tail("slurmdbd.log")
        self.run("sacctmgr", "-i", "add", "cluster", "diagtest")
        self._daemon(["slurmctld", "-D", "-i"], base / "log" / "slurmctld.out")
        if not _wait(lambda: self.run("scontrol", "ping").returncode == 0 and "UP" in self.run("scontrol", "ping").stdout, 30, 0.5):
            return "slurmctld did not start: " + self._log_tail("slurmctld.out") + self._log_tail("slurmctld.log")
        self._daemon(["slurmd", "-D"], base / "log" / "slurmd.out")
        if not _wait(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T").stdout, 60, 0.5):
            return "slurmd did not register: " + self._log_tail("slurmd.out") + self._log_tail("slurmd.log")
        return None

    def _ours(self) -> list[int]:
        """Processes this cluster started that outlive their daemon (slurmstepd, job scripts): the
        ones whose environment names this cluster's slurm.conf (a path unique to this cluster)."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as handle:
                    if mark in handle.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        # Jobs first, then the controller (no new jobs), the node daemon, accounting, the database, munge.
        if self.pids:
            jobs = self.run("squeue", "-h", "-o", "%i", timeout=10).stdout.split()
            if jobs:
                self.run("scancel", *jobs, timeout=10)
                _wait(lambda: not self.run("squeue", "-h", "-o", "%i", timeout=10).stdout.split(), 15, 0.5)
        for pid in reversed(self.pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        for pid in reversed(self.pids):
            for _ in range(50):
                try:
                    finished, _status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if finished:
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
        self.pids.clear()
        for pid in self._ours():  # a slurmstepd or job script left behind: by pid, never by name
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._remove_cgroups()
        shutil.rmtree(self.base, ignore_errors=True)

    def _remove_cgroups(self) -> None:
        """The job cgroups slurmd made (v1: <controller>/slurm/...; v2 under the node's scope)."""
        for controller in ("memory", "cpuset", "freezer", "devices", "cpuacct", "cpu", "pids", "unified"):
            for top in (Path("/sys/fs/cgroup") / controller / "slurm", Path("/sys/fs/cgroup") / controller / f"slurm_{self.node}"):
                if not top.is_dir():
                    continue
                for folder, _dirs, _files in sorted(os.walk(top), key=lambda item: -len(item[0])):
                    with contextlib.suppress(OSError):
                        os.rmdir(folder)

    # -- jobs

    def sbatch(self, script: str, *options: str, workdir: Path | None = None) -> str:
        folder = workdir or (self.base / "jobs")
        path = folder / f"job-{time.monotonic_ns()}.sh"
        path.write_text(script)
        result = self.run("sbatch", "--parsable", f"--chdir={folder}", *options, str(path), check=True)
        return result.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        out = self.run("sacct", "-j", job, "-X", "-n", "--parsable2", "--format=State").stdout.strip()
        return out.splitlines()[0] if out else ""

    def wait_done(self, job: str, seconds: float = 120) -> str:
        done = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")
        _wait(lambda: self.state(job).split(" ")[0] in done, seconds, 0.5)
        return self.state(job)
