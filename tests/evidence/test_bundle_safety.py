"""Bundles are written without touching anything but their own temp paths, and unpacked from
untrusted archives without applying what the archive says about owners, modes or special files,
within caps, into a private folder that goes away on every exit (SIGTERM too).

Everything here is real: `python -m diagnose` in a subprocess with its own $TMPDIR full of
sentinel files, hand-made tar files, the user `nobody` probing the folder through runuser.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnose.evidence import tempdirs
from diagnose.evidence.bundle import MAX_MEMBERS, MAX_UNPACKED_BYTES, evidence_from_bundle
from tests.support.cli import run_cli

SENTINELS = ("sentinel.txt", ".hidden-sentinel", "keep/inner.txt")
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (owners, setuid bits, runuser)")


def plant_sentinels(folder: Path) -> None:
    for name in SENTINELS:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"{name} must survive\n")


def assert_only_sentinels(folder: Path) -> None:
    """The folder holds the sentinels, intact, and nothing else (no temp leftovers of ours)."""
    left = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())
    assert left == sorted(SENTINELS), f"{folder}: {left}"
    assert sorted(p.name for p in folder.iterdir()) == sorted({Path(n).parts[0] for n in SENTINELS})
    for name in SENTINELS:
        assert (folder / name).read_text() == f"{name} must survive\n"


@pytest.fixture
def tmpdir_env(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A $TMPDIR of our own, world-traversable (0755, like /tmp is to everyone) so that a
    denial to `nobody` below comes from the folder diagnose made, not from pytest's 0700 one."""
    folder = Path(tempfile.mkdtemp(prefix="diagnose-test-tmpdir-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        plant_sentinels(folder)
        yield folder, {"TMPDIR": str(folder)}
    finally:
        shutil.rmtree(folder)  # made by this fixture, above


def crash_log() -> bytes:
    """What a Python training script that raised prints (run for real, not typed)."""
    done = subprocess.run([sys.executable, "-c", "print('step 1'); raise RuntimeError('evil bundle step 2')"],
                          capture_output=True, check=False)
    return done.stdout + done.stderr


def manifest_bytes(files: list[dict[str, object]] | None = None, **extra: object) -> bytes:
    data: dict[str, object] = {"format": "diagnose-bundle", "schema_version": 1, "run": {"id": "evil"},
                               "files": files if files is not None else [{"path": "logs/train.log", "kind": "log"}]}
    data.update(extra)
    return json.dumps(data).encode()


def member(name: str, data: bytes | None = None, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, uid: int = 0,
           linkname: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.linkname = kind, mode, uid, uid, linkname
    info.uname = info.gname = "root" if uid == 0 else ""
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3  # /dev/null's numbers
    info.size = len(data) if data is not None else 0
    return info, data


def write_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def good_members(log: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [member("logs", kind=tarfile.DIRTYPE, mode=0o755), member("logs/train.log", log),
            member("manifest.json", manifest_bytes())]


ZERO_CHUNK = 16 * 1024 * 1024


def write_zero_bomb(path: Path, sizes: list[int], manifest_first: bool = True) -> Path:
    """A .tar.gz whose members are `sizes` bytes of zeros each, written as concatenated gzip
    members (gzip readers take those as one stream): one 16 MiB gzip member of zeros, compressed
    once and written again and again, so many GiB cost a few MB and no memory."""
    zeros = gzip.compress(b"\0" * ZERO_CHUNK, compresslevel=9)
    with open(path, "wb") as out:
        if manifest_first:
            info, data = member("manifest.json", manifest_bytes([]))
            assert data is not None
            out.write(gzip.compress(info.tobuf() + data + b"\0" * (-len(data) % 512)))
        for index, size in enumerate(sizes):
            assert size % ZERO_CHUNK == 0
            info, _ = member(f"logs/zeros{index}.log")
            info.size = size
            out.write(gzip.compress(info.tobuf()))
            for _ in range(size // ZERO_CHUNK):
                out.write(zeros)
        out.write(gzip.compress(b"\0" * 1024))  # the two zero blocks that end a tar archive
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("diagnose-"))


# ------------------------------------------------------------------ collect: deletes nothing


@pytest.fixture
def unpacks_here() -> Iterator[None]:
    """For tests that open archives in this process: remove what was unpacked and give pytest
    back its own signal handlers (the first unpack installs diagnose's)."""
    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}
    yield
    tempdirs.remove_all()
    for number, handler in saved.items():
        signal.signal(number, handler)


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "flex7").mkdir(parents=True)
    (run / "flex7" / "rank0.log").write_bytes(crash_log())
    (run / "diagnose.toml").write_text(
        f'[collect]\nskip = ["gpu", "dmesg", "packages", "tmux"]\n[run]\ndir = "{run}"\nlogs = "flex7/rank*.log"\n')
    return run


@pytest.mark.parametrize("out", [".x.tar.gz", ".tar.gz", "..tgz", "x", "dir/", "x.tar.gz", "sub/deeper/b.tgz", ".hidden",
                                 "{tmpdir}/.x.tar.gz", "{tmpdir}/out-dir"])
def test_collect_removes_nothing_it_did_not_make(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]], out: str,
                                                unpacks_here: None) -> None:
    """The bug: `-o .name.tar.gz` staged into mkdtemp()/'' and then rmtree'd mkdtemp's parent,
    the whole of $TMPDIR. Every output shape, inside $TMPDIR too, leaves the sentinels alone."""
    tmpdir, env = tmpdir_env
    run = make_run(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    plant_sentinels(work)
    out = out.format(tmpdir=tmpdir)
    result = run_cli(["collect", "flex7", "--config", str(run / "diagnose.toml"), "-o", out], cwd=work, env=env)
    assert result.returncode == 0, result.stderr
    target = (work / out) if not os.path.isabs(out) else Path(out)
    bundle = Path(os.path.abspath(target))
    evidence = evidence_from_bundle(bundle)
    assert [t.display for t in evidence.texts] == [str(run / "flex7" / "rank0.log")]
    assert Path(evidence.texts[0].path).read_bytes() == (run / "flex7" / "rank0.log").read_bytes()
    # Beside the bundle: only the bundle (no .NAME.*.tmp staging left); $TMPDIR: only the sentinels.
    siblings = sorted(p.name for p in bundle.parent.iterdir())
    expected = {bundle.name, *{Path(n).parts[0] for n in SENTINELS}} if bundle.parent in (work, tmpdir) else {bundle.name}
    assert set(siblings) == expected, siblings
    if bundle.parent != tmpdir:
        assert_only_sentinels(tmpdir)
    else:
        (bundle.unlink() if bundle.is_file() else shutil.rmtree(bundle))  # ours, made just above
        assert_only_sentinels(tmpdir)
    assert (work / "sentinel.txt").read_text() == "sentinel.txt must survive\n"


def test_collect_never_replaces_an_existing_output(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    tmpdir, env = tmpdir_env
    run = make_run(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (work / "old.tar.gz").write_text("an older bundle")
    (work / "full").mkdir()
    (work / "full" / "mine.txt").write_text("mine")
    (work / "link.tar.gz").symlink_to(work / "elsewhere.tar.gz")
    (work / "empty").mkdir()
    for out, message in [("old.tar.gz", "already exists"), ("full", "exists and is not empty"), (".", "exists and is not empty"),
                         ("link.tar.gz", "already exists"), ("old.tar.gz/x.tar.gz", "cannot write the bundle")]:
        result = run_cli(["collect", "flex7", "--config", str(run / "diagnose.toml"), "-o", out], cwd=work, env=env)
        assert result.returncode == 2, (out, result.stderr)
        assert result.stderr.startswith(f"diagnose: error: {out}: {message}"), result.stderr
        assert len(result.stderr.splitlines()) == 1 and "internal error" not in result.stderr
    assert (work / "old.tar.gz").read_text() == "an older bundle"
    assert (work / "full" / "mine.txt").read_text() == "mine" and sorted(os.listdir(work / "full")) == ["mine.txt"]
    assert not (work / "elsewhere.tar.gz").exists()
    assert sorted(os.listdir(work)) == ["empty", "full", "link.tar.gz", "old.tar.gz"]  # no staging left behind
    # An existing empty folder is still a fine target.
    result = run_cli(["collect", "flex7", "--config", str(run / "diagnose.toml"), "-o", "empty"], cwd=work, env=env)
    assert result.returncode == 0, result.stderr
    assert (work / "empty" / "manifest.json").is_file()
    assert_only_sentinels(tmpdir)


# ------------------------------------------------------------------ unpacking untrusted archives


def wait_for(predicate: object, what: str, timeout: float = 60.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "nobody", "--", *args], capture_output=True, text=True, check=False, timeout=30)


@ROOT_ONLY
def test_hostile_owners_modes_and_dot_member_are_not_applied(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    """A '.' member 0777, a setuid+setgid root-owned executable, files owned by another uid:
    unpacked as root, the folder is 0700, everything is root's, 0600/0700, no s-bits, no x
    bits; `nobody` can neither list, read nor write it while the diagnosis runs."""
    tmpdir, env = tmpdir_env
    log = crash_log()
    archive = write_archive(tmp_path / "evil.tar.gz", [
        member(".", kind=tarfile.DIRTYPE, mode=0o777),
        member("logs", kind=tarfile.DIRTYPE, mode=0o7777, uid=1234),
        member("logs/train.log", log, mode=0o6755, uid=0),
        member("bin/rootshell", b"#!/bin/sh\nid\n", mode=0o4755, uid=0),
        member("bin/theirs", b"x", mode=0o666, uid=65534),
        member("manifest.json", manifest_bytes(), mode=0o777, uid=1234),  # last: once it is there, all is
    ])
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    # The report goes to a fifo nobody reads yet: diagnose waits there with the folder unpacked.
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", str(archive), "--format", "json", "-o", str(fifo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        wait_for(lambda: any((p / "manifest.json").exists() for p in tmpdir.glob("diagnose-bundle-*")), "the unpacked manifest")
        [folder] = list(tmpdir.glob("diagnose-bundle-*"))
        time.sleep(0.2)  # the manifest's bytes are being copied
        top = folder.stat()
        assert stat.S_IMODE(top.st_mode) == 0o700 and top.st_uid == 0, oct(top.st_mode)
        for path in [folder, *folder.rglob("*")]:
            st = path.lstat()
            assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), path
            assert stat.S_IMODE(st.st_mode) == (0o700 if stat.S_ISDIR(st.st_mode) else 0o600), (path, oct(st.st_mode))
            assert (st.st_uid, st.st_gid) == (0, 0), path
        assert (folder / "logs" / "train.log").read_bytes() == log
        # nobody can reach the $TMPDIR (the control), but not into the folder diagnose made.
        assert as_nobody("ls", str(tmpdir)).returncode == 0
        assert as_nobody("cat", str(tmpdir / "sentinel.txt")).returncode == 0
        for probe in (["ls", str(folder)], ["cat", str(folder / "logs" / "train.log")], ["touch", str(folder / "planted")],
                      ["stat", str(folder / "bin" / "rootshell")]):
            denied = as_nobody(*probe)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, (probe, denied)
        with open(fifo, encoding="utf-8") as reader:  # let the report out
            report = json.loads(reader.read())
        _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    assert any("evil bundle step 2" in e["text"] for c in report["causes"] for e in c["evidence"]), report["causes"]
    assert_only_sentinels(tmpdir)  # the unpacked folder went at exit


@pytest.mark.parametrize(("name", "bad", "says"), [
    ("symlink", member("logs/train.log", kind=tarfile.SYMTYPE, linkname="/etc/shadow"), "is a symbolic link"),
    ("relative symlink", member("logs/up", kind=tarfile.SYMTYPE, linkname="../../.."), "is a symbolic link"),
    ("hardlink", member("logs/passwd", kind=tarfile.LNKTYPE, linkname="/etc/passwd"), "is a hard link"),
    ("inner hardlink", member("logs/again.log", kind=tarfile.LNKTYPE, linkname="logs/train.log"), "is a hard link"),
    ("char device", member("dev/mem", kind=tarfile.CHRTYPE, mode=0o666), "is a device"),
    ("block device", member("dev/sda", kind=tarfile.BLKTYPE, mode=0o666), "is a device"),
    ("fifo", member("logs/pipe", kind=tarfile.FIFOTYPE, mode=0o666), "is a fifo"),
    ("absolute", member("/tmp/diagnose-planted", b"x"), "points outside the bundle"),
    ("dotdot", member("logs/../../diagnose-planted", b"x"), "points outside the bundle"),
    ("duplicate", member("logs/train.log", b"second copy"), "has member 'logs/train.log' twice"),
])
def test_special_and_escaping_members_refuse_the_archive(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]],
                                                         name: str, bad: tuple[tarfile.TarInfo, bytes | None], says: str) -> None:
    tmpdir, env = tmpdir_env
    archive = write_archive(tmp_path / "evil.tar.gz", [*good_members(crash_log()), bad])
    result = run_cli([str(archive)], cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"diagnose: error: {archive}: bundle archive ") and says in line, line
    assert "internal error" not in line and "Traceback" not in result.stderr
    assert_only_sentinels(tmpdir)
    assert not Path("/tmp/diagnose-planted").exists() and not (tmp_path / "diagnose-planted").exists()


def test_gzip_bomb_is_refused_before_anything_is_written(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    """8 GiB of zeros in an 8 MB file (the report: a 10 MB bundle wrote 10 GiB)."""
    tmpdir, env = tmpdir_env
    bomb = write_zero_bomb(tmp_path / "bomb.tar.gz", [8 * 1024**3])
    assert bomb.stat().st_size < 16 * 1024**2
    result = run_cli([str(bomb)], cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"diagnose: error: {bomb}: bundle archive unpacks to more than 2.0 GiB; "
                                          "refusing it (set DIAGNOSE_BUNDLE_MAX_BYTES to allow more)"]
    assert_only_sentinels(tmpdir)


def test_many_small_members_hit_the_caps_too(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    """No single member is big, the sum is: the dry pass refuses it before writing. The caps are
    configurable (here lowered, so the test reads only a little)."""
    tmpdir, env = tmpdir_env
    bomb = write_zero_bomb(tmp_path / "bomb.tar.gz", [ZERO_CHUNK] * 6, manifest_first=False)
    result = run_cli([str(bomb)], cwd=tmp_path, env={**env, "DIAGNOSE_BUNDLE_MAX_BYTES": str(5 * ZERO_CHUNK)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"diagnose: error: {bomb}: bundle archive unpacks to more than 80 MiB; "
                                          "refusing it (set DIAGNOSE_BUNDLE_MAX_BYTES to allow more)"]
    assert_only_sentinels(tmpdir)
    many = write_archive(tmp_path / "many.tar.gz", [member("manifest.json", manifest_bytes([]))]
                         + [member(f"logs/{n}.log", b"") for n in range(60)])
    result = run_cli([str(many)], cwd=tmp_path, env={**env, "DIAGNOSE_BUNDLE_MAX_MEMBERS": "50"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"diagnose: error: {many}: bundle archive has more than 50 members; "
                                          "refusing it (set DIAGNOSE_BUNDLE_MAX_MEMBERS to allow more)"]
    assert_only_sentinels(tmpdir)
    bad = run_cli([str(many)], cwd=tmp_path, env={**env, "DIAGNOSE_BUNDLE_MAX_MEMBERS": "lots"})
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        "diagnose: error: DIAGNOSE_BUNDLE_MAX_MEMBERS='lots': expected a positive whole number"]
    assert (MAX_UNPACKED_BYTES, MAX_MEMBERS) == (2 * 1024**3, 100_000)


def test_sigterm_during_diagnosis_leaves_no_unpacked_folder(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    tmpdir, env = tmpdir_env
    archive = write_archive(tmp_path / "b.tar.gz", good_members(crash_log()))
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", str(archive), "--format", "json", "-o", str(fifo)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        wait_for(lambda: any((p / "manifest.json").exists() for p in tmpdir.glob("diagnose-bundle-*")), "the unpacked manifest")
        proc.send_signal(signal.SIGTERM)  # while it diagnoses, or waits to write the report
        _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.splitlines() == ["diagnose: terminated by SIGTERM"]
    assert_only_sentinels(tmpdir)


def test_sigterm_while_unpacking_leaves_nothing(tmp_path: Path, tmpdir_env: tuple[Path, dict[str, str]]) -> None:
    tmpdir, env = tmpdir_env
    big = write_zero_bomb(tmp_path / "big.tar.gz", [32 * ZERO_CHUNK])  # 512 MiB: under the cap, slow to write
    proc = subprocess.Popen([sys.executable, "-m", "diagnose", str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})
    try:
        wait_for(lambda: bool(list(tmpdir.glob("diagnose-bundle-*"))), "the unpack folder")
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert_only_sentinels(tmpdir)


def test_an_existing_sigterm_handler_is_left_alone(tmp_path: Path) -> None:
    """Only where SIGTERM has its default action is it turned into a clean exit."""
    archive = write_archive(tmp_path / "b.tar.gz", good_members(crash_log()))
    code = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "mine = lambda *a: None\n"
        "signal.signal(signal.SIGTERM, mine)\n"
        "from diagnose.evidence.bundle import open_bundle\n"
        f"root, _ = open_bundle(Path({str(archive)!r}))\n"
        "assert signal.getsignal(signal.SIGTERM) is mine\n"
        "assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL\n"  # default one: ours now
        "print(root)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    unpacked = Path(done.stdout.strip())
    assert unpacked.parent == tmp_path and not unpacked.exists()  # removed at exit
