#!/usr/bin/env python3
"""Remote benchmark (issue 14): `diagnose RUN --host` against `ssh host cat LOG | diagnose scan -`.

    python bench/remote_bench.py                 # 1 GiB log; loopback and a 100 Mbit/s link
    python bench/remote_bench.py --size-mb 256 --runs 1 --links loopback

What it does, and why it is fair:
- a real sshd (tests/support/remote.py: generated keys, known_hosts and client config,
  never ~/.ssh), reached as root@ADDR:PORT behind the fake-pct exec hop into a container
  stand-in (pid and mount namespaces), as `diagnose flex7 --host root@10.1.2.6 --exec 'pct
  exec 200 --'` reaches a Proxmox container; both tools go through the same ssh and prefix;
- the log (bench/loggen.py, cached under --workdir: real shapes, tqdm bars with raw '\\r', 8
  ranks, two real crashes) is the run's train_flex7.log in the container's workspace;
- links: `loopback` (127.0.0.1) and `100mbit` (sshd inside a network namespace behind a veth
  pair, both ends shaped to 100 Mbit/s with tc tbf; a LAN to a lab box or a fast WAN);
- A = `diagnose flex7 --host ... --exec ... --format json`: everything (connect, discovery,
  every collector, the remote grep, the local confirmation, the report); bytes over ssh from
  its own stats (stats.remote.bytes_transferred, all commands);
- B = `ssh host fake-pct exec 200 -- cat LOG | diagnose scan - --format json`, one shell
  pipeline: the log alone copied through (its bytes counted once, untimed, with wc -c); no
  discovery, no other collector;
- both end to end, wall clock, median of --runs, interleaved; warm page cache and warm
  diagnose caches (one untimed run of A first; B's byte count warms the cache for B); the
  answers are compared: every cause both report from the log must rest on the same lines.
Needs root (sshd, namespaces), openssh-server, GNU grep/find on the "remote" side, tc for the
shaped link (skipped when missing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from bench import loggen  # noqa: E402
from tests.support.remote import INSIDE, Container, Sshd  # noqa: E402

NETNS = "diagnose-bench"
VETH = ("dgbench0", "dgbench1")
ADDRESSES = ("10.253.14.1", "10.253.14.2")


def log_path(work: Path, size_mb: int) -> Path:
    path = work / f"remote-bench-v{loggen.VERSION}-{size_mb}MiB.log"
    if not path.exists():
        print(f"generating {path} ({size_mb} MiB) ...", file=sys.stderr)
        loggen.generate(path, size_mb * 1024 * 1024)
    return path


@contextlib.contextmanager
def shaped_link(rate: str) -> Iterator[str]:
    """A network namespace behind a veth pair shaped to `rate` both ways; yields the address
    inside. Everything made is removed after."""
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    ip("netns", "add", NETNS)
    try:
        ip("link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
        ip("link", "set", VETH[1], "netns", NETNS)
        ip("addr", "add", f"{ADDRESSES[0]}/30", "dev", VETH[0])
        ip("link", "set", VETH[0], "up")
        ip("netns", "exec", NETNS, "ip", "addr", "add", f"{ADDRESSES[1]}/30", "dev", VETH[1])
        ip("netns", "exec", NETNS, "ip", "link", "set", VETH[1], "up")
        ip("netns", "exec", NETNS, "ip", "link", "set", "lo", "up")
        for inside, device in (([], VETH[0]), (["ip", "netns", "exec", NETNS], VETH[1])):
            subprocess.run([*inside, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", "64kb",
                            "latency", "50ms"], check=True, capture_output=True, timeout=30)
        yield ADDRESSES[1]
    finally:
        subprocess.run(["ip", "link", "del", VETH[0]], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True, timeout=30)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "DIAGNOSE_CACHE_DIR": str(REPO / "bench" / "out" / "diagnose-cache")}


def run_host(sshd: Sshd, box: Container, config: Path, cwd: Path) -> tuple[float, int, dict]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "diagnose", "flex7", "--host", sshd.target, "--exec", box.exec_prefix,
                             "--config", str(config), "--format", "json"], capture_output=True, text=True, env=env(),
                            cwd=cwd, timeout=3600)
    took = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise SystemExit(f"diagnose --host failed ({result.returncode}): {result.stderr}")
    data = json.loads(result.stdout)
    return took, int(data["stats"]["remote"]["bytes_transferred"]), data


def cat_argv(sshd: Sshd, box: Container) -> list[str]:
    return ["ssh", "-F", str(sshd.client_config), "-p", str(sshd.port), f"root@{sshd.address}", "--",
            *box.exec_prefix.split(), "cat", f"{INSIDE}/train_flex7.log"]


def cat_bytes(sshd: Sshd, box: Container) -> int:
    """What `ssh ... cat LOG` sends (counted once, untimed: the timed runs pipe it straight on)."""
    result = subprocess.run(["sh", "-c", shlex.join(cat_argv(sshd, box)) + " | wc -c"], capture_output=True, text=True,
                            timeout=3600)
    return int(result.stdout.strip())


def run_cat(sshd: Sshd, box: Container, cwd: Path, sent: int) -> tuple[float, int, dict]:
    """`ssh ... fake-pct exec 200 -- cat LOG | diagnose scan -`, one shell pipeline as typed."""
    command = shlex.join(cat_argv(sshd, box)) + " | " + shlex.join([sys.executable, "-m", "diagnose", "scan", "-",
                                                                      "--format", "json"])
    started = time.perf_counter()
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env(), cwd=cwd, timeout=3600)
    took = time.perf_counter() - started
    if result.returncode not in (0, 1):
        raise SystemExit(f"ssh cat | diagnose scan - failed ({result.returncode}): {result.stderr}")
    return took, sent, json.loads(result.stdout)


def log_hits(data: dict) -> dict[str, tuple[int, ...]]:
    """Per cause id, the log lines it rests on (the sources differ: a path, <stdin>). A cause
    only one of them reports (state, attribution: the live run knows more) is not compared."""
    found = {}
    for cause in data["causes"]:
        lines = tuple(e["line"] for e in cause["evidence"] if e.get("source", "").endswith(("train_flex7.log", "<stdin>")))
        if lines:
            found[cause["id"]] = lines
    return found


def same_lines(host: dict, cat: dict) -> tuple[bool, list[str]]:
    a, b = log_hits(host), log_hits(cat)
    shared = sorted(set(a) & set(b))
    return bool(shared) and all(a[c] == b[c] for c in shared), shared


def human(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count:.0f} B"


def bench_link(name: str, sshd: Sshd, box: Container, config: Path, cwd: Path, runs: int, size: int) -> dict:
    print(f"--- link {name}: warm-up", file=sys.stderr)
    sent = cat_bytes(sshd, box)
    run_host(sshd, box, config, cwd)
    host: list[tuple[float, int, dict]] = []
    cat: list[tuple[float, int, dict]] = []
    for index in range(runs):
        print(f"--- link {name}: run {index + 1}/{runs}", file=sys.stderr)
        host.append(run_host(sshd, box, config, cwd))
        cat.append(run_cat(sshd, box, cwd, sent))
    same, shared = same_lines(host[-1][2], cat[-1][2])
    return {
        "link": name, "size": size,
        "host_s": statistics.median(t for t, _b, _d in host), "host_bytes": statistics.median(b for _t, b, _d in host),
        "cat_s": statistics.median(t for t, _b, _d in cat), "cat_bytes": statistics.median(b for _t, b, _d in cat),
        "same": same, "causes": shared,
        "files": host[-1][2]["stats"]["collect"]["remote"]["files"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the remote log (MiB)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per tool on loopback")
    parser.add_argument("--shaped-runs", type=int, default=1, help="timed runs per tool on the shaped link")
    parser.add_argument("--links", default="loopback,100mbit", help="comma-separated: loopback, 100mbit")
    parser.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args(argv)
    # SIGTERM (and SIGINT, ignored in a background job) end the run through the `finally`s
    # below, which stop the sshd, the container and the network namespace made here.
    import signal

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda signum, _frame: sys.exit(128 + signum))
    if os.geteuid() != 0:
        raise SystemExit("needs root (sshd on loopback, namespaces)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    source = log_path(args.workdir, args.size_mb)
    results = []
    with tempfile.TemporaryDirectory(prefix="diagnose-remote-bench-", dir=args.workdir) as scratch:
        base = Path(scratch)
        workspace = base / "workspace"
        workspace.mkdir()
        os.link(source, workspace / "train_flex7.log")  # the cached log itself, no copy
        box = Container(base / "ct", workspace)
        try:
            for link in args.links.split(","):
                if link == "loopback":
                    sshd = Sshd(base / "sshd-lo")
                    try:
                        results.append(bench_link("loopback", sshd, box, write_config(base, sshd), base, args.runs,
                                                  source.stat().st_size))
                    finally:
                        sshd.stop()
                elif link == "100mbit":
                    if shutil.which("tc") is None:
                        print("skipping the 100mbit link: no tc", file=sys.stderr)
                        continue
                    with shaped_link("100mbit") as address:
                        sshd = Sshd(base / "sshd-100mbit", address=address, netns=NETNS)
                        try:
                            results.append(bench_link("100 Mbit/s", sshd, box, write_config(base, sshd), base,
                                                      args.shaped_runs, source.stat().st_size))
                        finally:
                            sshd.stop()
        finally:
            box.stop()
    report(results, args.size_mb)
    return 0 if all(r["same"] for r in results) else 1


def write_config(base: Path, sshd: Sshd) -> Path:
    path = base / f"diagnose-{sshd.port}.toml"
    path.write_text(f'[host]\nssh_config = "{sshd.client_config}"\n[run]\ndir = "{INSIDE}"\n')
    return path


def report(results: list[dict], size_mb: int) -> None:
    print(f"\nremote log {size_mb} MiB ({INSIDE}/train_flex7.log), behind fake-pct exec 200 --; median wall clock")
    print(f"{'link':<12} {'tool':<44} {'wall s':>8} {'over ssh':>12}")
    for r in results:
        print(f"{r['link']:<12} {'diagnose flex7 --host ... --exec ...':<44} {r['host_s']:>8.2f} {human(r['host_bytes']):>12}")
        print(f"{'':<12} {'ssh host ... cat LOG | diagnose scan -':<44} {r['cat_s']:>8.2f} {human(r['cat_bytes']):>12}")
        print(f"{'':<12} {'ratio --host / cat':<44} {r['host_s'] / r['cat_s']:>8.2f} "
              f"{r['host_bytes'] / max(1, r['cat_bytes']):>12.5f}")
        share = 100.0 * r["host_bytes"] / r["size"]
        print(f"{'':<12} bytes over ssh: {share:.3f} % of the log; same causes and line numbers: "
              f"{'yes' if r['same'] else 'NO'} ({', '.join(r['causes'])})")
        for name, entry in r["files"].items():
            print(f"{'':<12} {name}: {entry.get('mode')}, {entry.get('candidates')} candidate lines, "
                  f"{entry.get('context_lines')} context lines, {human(entry.get('received', 0))} for it, "
                  f"{entry.get('seconds')} s")


if __name__ == "__main__":
    raise SystemExit(main())
