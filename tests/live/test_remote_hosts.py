"""SshHost answers every Host question as LocalHost answers it on the machine itself: the same
tree (odd names, links to files, folders and nowhere, a FIFO that must never be opened, deep
folders) and the same process, asked from outside over a real sshd and the fake-pct hop, and
from inside the container with LocalHost. Our own remote commands never show in its process
table; a process of the run always does."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from diagnose.live.remotehost import SshHost
from diagnose.live.ssh import Remote, parse_exec, parse_target
from tests.support.paths import REPO
from tests.support.remote import INSIDE

NAMES = ["plain.log", "with space.log", "quote'd.log", 'dq"x.log', "$(id).log", "new\nline.log", "é-utf8.log",
         ".hidden.log", "-dash.log", "empty.log"]
PATTERNS = [f"{INSIDE}/*.log", f"{INSIDE}/.*.log", f"{INSIDE}/d1/*/*", f"{INSIDE}/**/*.txt", f"{INSIDE}/[dl]*",
            f"{INSIDE}/missing/*", f"{INSIDE}/d1/d2/d3/d4/d5/deep.txt", f"{INSIDE}/link-dir/*", f"{INSIDE}/plain.log"]

# What LocalHost says, inside the container (run there by the test with the repo's interpreter).
INSIDE_PROBE = r'''
import json, sys
from diagnose.live.hosts import LocalHost
h = LocalHost()
paths, patterns, pid = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
def st(p):
    try:
        s = h.stat(p)
    except PermissionError:
        return "EACCES"
    return None if s is None else [s.size, s.mtime, s.is_dir, s.is_file, s.is_socket, s.mode, s.uid]
def rd(p, n, o):
    try:
        return h.read_bytes(p, n, o).decode("latin-1")
    except OSError as exc:
        return f"error {type(exc).__name__} {exc.errno}"
procs = {p.pid: p for p in h.processes()}
me = procs[pid]
print(json.dumps({
    "stat": {p: st(p) for p in paths},
    "listdir": {p: h.listdir(p) for p in paths},
    "glob": {p: h.glob(p) for p in patterns},
    "walk": [[p, s.size] for p, s in h.walk(sys.argv[4], 1000)],
    "read": {p: [rd(p, 5, 0), rd(p, 7, -4), rd(p, 3, 2), rd(p, 1 << 20, 0)] for p in paths},
    "free": h.free_bytes(sys.argv[4] + "/d1/nothing/here"),
    "boot": h.boot_time(), "uid": h.uid(), "home": h.home(),
    "proc": [me.ppid, list(me.cmdline), me.comm, me.cwd, me.exe, me.start_time],
    "environ": h.proc_environ(pid), "fds": sorted(h.proc_fds(pid) or []), "cgroup": h.proc_cgroup(pid),
}))
'''


def build_tree(top: Path) -> list[str]:
    for name in NAMES:
        (top / name).write_bytes(b"" if name == "empty.log" else f"line one of {name}\nline two\n".encode())
    deep = top / "d1" / "d2" / "d3" / "d4" / "d5"
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_text("deep\n")
    (top / "d1" / "a.txt").write_text("a\n")
    (top / "d1" / "d2" / "b.txt").write_text("b\n")
    (top / "logs").mkdir()
    (top / "logs" / "rank0.log").write_text("rank 0\n")
    os.symlink("plain.log", top / "link-file.log")
    os.symlink("d1", top / "link-dir")
    os.symlink("nowhere", top / "dangling.log")
    os.mkfifo(top / "fifo.log")  # opening it would block forever: never opened
    big = top / "big.log"
    with open(big, "wb") as out:
        for index in range(200_000):
            out.write(f"{index:09d} step line\n".encode())
    inside = [f"{INSIDE}/{name}" for name in [*NAMES, "link-file.log", "link-dir", "dangling.log", "fifo.log", "big.log",
                                               "d1", "d1/d2/d3", "missing", "plain.log/not-a-dir", "locked.log"]]
    return [INSIDE, *inside]


def test_every_host_question_answered_as_there(tmp_path, sshd, container):
    paths = build_tree(container.workspace)
    # The run: a process inside the container with its own cwd and environment.
    run = container.start("env", "RUN_NAME=flex7", "sh", "-c", f"cd {INSIDE}/d1 && exec sleep 300")
    time.sleep(0.3)
    pid_inside = int(container.run("sh", "-c", "for p in /proc/[0-9]*; do "
                                   "tr '\\0' ' ' < $p/cmdline | grep -q '^sleep 300' && basename $p; done; true").stdout.split()[0])
    env = [f"PYTHONPATH={os.environ.get('PYTHONPATH', REPO)}"]
    there = container.run("env", *env, sys.executable, "-c", INSIDE_PROBE, json.dumps(paths), json.dumps(PATTERNS),
                          str(pid_inside), INSIDE)
    expected = json.loads(there.stdout)

    host = SshHost(Remote(parse_target(sshd.target), parse_exec(container.exec_prefix), config_file=str(sshd.client_config)))
    try:
        def st(path: str) -> object:
            try:
                found = host.stat(path)
            except PermissionError:
                return "EACCES"
            return None if found is None else [found.size, found.mtime, found.is_dir, found.is_file, found.is_socket,
                                               found.mode, found.uid]

        def rd(path: str, limit: int, offset: int) -> str:
            try:
                return host.read_bytes(path, limit, offset).decode("latin-1")
            except OSError as exc:
                return f"error {type(exc).__name__} {exc.errno}"

        for path in paths:
            ours, theirs = st(path), expected["stat"][path]
            if isinstance(ours, list) and isinstance(theirs, list):
                assert ours[:1] + ours[2:] == theirs[:1] + theirs[2:], path
                assert abs(ours[1] - theirs[1]) < 1e-6, path  # a float printed and read back
            else:
                assert ours == theirs, path
            assert host.listdir(path) == expected["listdir"][path], path
            assert [rd(path, 5, 0), rd(path, 7, -4), rd(path, 3, 2), rd(path, 1 << 20, 0)] == expected["read"][path], path
        for pattern in PATTERNS:
            assert host.glob(pattern) == expected["glob"][pattern], pattern
        assert [[p, s.size] for p, s in host.walk(INSIDE, 1000)] == expected["walk"]
        assert host.free_bytes(f"{INSIDE}/d1/nothing/here") == pytest.approx(expected["free"], rel=0.01)
        assert (host.boot_time(), host.uid(), host.home()) == (expected["boot"], expected["uid"], expected["home"])
        procs = {p.pid: p for p in host.processes()}
        me = procs[pid_inside]
        ppid, cmdline, comm, cwd, exe, started = expected["proc"]
        assert (me.ppid, list(me.cmdline), me.comm, me.cwd, me.exe) == (ppid, cmdline, comm, cwd, exe)
        assert me.start_time == pytest.approx(started, abs=0.02)
        assert host.proc_environ(pid_inside) == expected["environ"]
        assert sorted(host.proc_fds(pid_inside) or []) == expected["fds"]
        assert host.proc_cgroup(pid_inside) == expected["cgroup"]
        assert (stat := host.proc_stat(pid_inside)) is not None and stat.state == "S"
        assert not Path(container.workspace / "fifo.log").stat().st_size  # nothing was ever written to it either
    finally:
        host.close()
        run.kill()
        run.wait()


def test_our_own_remote_commands_are_not_in_the_process_table(sshd, container):
    """While a command of ours that names the run runs there, the process table has no trace of
    it; a process of the run (started there by someone else) is in it."""
    run = container.start("python3", "-c", "import time; time.sleep(300)", "flex7-the-run")
    host = SshHost(Remote(parse_target(sshd.target), parse_exec(container.exec_prefix), config_file=str(sshd.client_config)))
    try:
        worker = threading.Thread(target=host.run, args=(["sh", "-c", "sleep 4", "flex7-ours"], 10.0))
        worker.start()
        deadline = time.time() + 10
        while not any(b"flex7-ours" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in container.pids()
                      if Path(f"/proc/{pid}/cmdline").exists()):
            assert time.time() < deadline, "our command never started there"
            time.sleep(0.02)
        table = host.processes()
        worker.join()
        assert not [p for p in table if any("flex7-ours" in arg for arg in p.cmdline)], "our own command is listed"
        assert [p.cmdline[1:] for p in table if "flex7-the-run" in p.cmdline] == [
            ("-c", "import time; time.sleep(300)", "flex7-the-run")]
        assert not [p for p in table if any(arg.startswith("DGX") for arg in p.cmdline)]
    finally:
        host.close()
        run.kill()
        run.wait()
