"""`diagnose collect RUN_ID -o OUT`: the bundle layout, manifest.json per collector (status,
duration, bytes, gap reason), directory and .tar.gz, and the same evidence read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnose.evidence.bundle import Manifest, evidence_from_bundle, open_bundle, write_bundle
from diagnose.evidence.model import Evidence
from tests.support.cli import run_cli
from tests.support.live import collect, config
from tests.support.paths import FIXTURES


def make_run(tmp_path: Path, skip: str = '"gpu"') -> Path:
    run = tmp_path / "run"
    (run / "flex7").mkdir(parents=True)
    for rank in (0, 1):
        with open(run / "flex7" / f"rank{rank}.log", "w") as handle:
            subprocess.run([sys.executable, "-c", f"print('rank {rank} step 1'); raise RuntimeError('rank {rank} failed')"],
                           stdout=handle, stderr=subprocess.STDOUT, check=False)
    (run / "ckpt").mkdir()
    (run / "ckpt" / "step_1.pt").write_bytes(b"\0" * 100)
    (run / "diagnose.toml").write_text(
        f'[collect]\nskip = [{skip}]\n[run]\ndir = "{run}"\nlogs = "flex7/rank*.log"\ncheckpoints = "ckpt"\n'
        f'python = "{sys.executable}"\ntmux_session = "{{run}}"\ntmux_socket = "{tmp_path}/no-tmux"\n')
    return run


def same_evidence(live: Evidence, saved: Evidence) -> None:
    assert [(t.kind, t.display, t.rank, t.mtime, t.boot_time) for t in saved.texts] == \
           [(t.kind, t.display, t.rank, t.mtime, t.boot_time) for t in live.texts]
    for live_text, saved_text in zip(live.texts, saved.texts, strict=True):
        assert Path(saved_text.path).read_bytes() == Path(live_text.path).read_bytes()
    assert saved.packages == live.packages
    assert (saved.tmux, saved.files, saved.checkpoints, saved.process, saved.exits) == \
           (live.tmux, live.files, live.checkpoints, live.process, live.exits)
    assert saved.gaps == live.gaps
    assert saved.run.id == live.run.id and saved.run.launcher == live.run.launcher


@pytest.mark.parametrize("name", ["bundle-dir", "bundle.tar.gz"])
def test_collect_writes_a_bundle_that_reads_back_the_same(tmp_path: Path, name: str) -> None:
    run = make_run(tmp_path)
    cfg = config(run, (run / "diagnose.toml").read_text())
    collection = collect("flex7", cfg, [run])
    out = tmp_path / name
    write_bundle(out, collection.manifest, collection.copies())
    same_evidence(collection.evidence(), evidence_from_bundle(out))
    root, manifest = open_bundle(out)
    data = json.loads((root / "manifest.json").read_text())
    assert (data["format"], data["schema_version"]) == ("diagnose-bundle", 1)
    assert set(data["collectors"]) == {"logs", "dmesg", "checkpoints", "tmux", "packages", "gpu", "process"}
    for status in data["collectors"].values():
        assert set(status) == {"status", "duration_s", "bytes", "reason"}
    assert data["collectors"]["gpu"] == {"status": "skipped", "duration_s": 0.0, "bytes": 0,
                                         "reason": "skipped by the config ([collect] skip)"}
    logs = data["collectors"]["logs"]
    assert logs["status"] == "ok" and logs["bytes"] == sum(p.stat().st_size for p in (run / "flex7").glob("rank*.log"))
    assert {f["path"] for f in data["files"]} >= {f"logs{run}/flex7/rank0.log", f"logs{run}/flex7/rank1.log",
                                                  "env/packages.json"}
    for item in data["files"]:
        assert (root / item["path"]).is_file()
    assert data["run"]["boot_time"] and data["run"]["id"] == "flex7"
    assert data["tmux"]["expected_session"] == "flex7" and data["checkpoints"]["file_count"] == 1
    assert manifest.collectors["tmux"].status == "ok"


def test_collect_command_prints_per_collector_status(tmp_path: Path) -> None:
    # Without dmesg: these logs carry no timestamps, so the whole kernel log since boot would
    # count, with whatever OOM kills other tests left in it.
    run = make_run(tmp_path, skip='"gpu", "dmesg"')
    out = tmp_path / "b"
    result = run_cli(["collect", "flex7", "-o", str(out)], cwd=run)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.split()[:2] == ["logs", "ok"] for line in lines)
    assert any(line.split()[:2] == ["gpu", "skipped"] for line in lines)
    assert lines[-1] == f"diagnose: wrote {out} ({len(json.loads((out / 'manifest.json').read_text())['files'])} file(s)); " \
                        f"diagnose it with: diagnose {out}"
    live = run_cli(["flex7", "--format", "json"], cwd=run)
    saved = run_cli([str(out), "--format", "json"], cwd=tmp_path)
    assert live.returncode == saved.returncode == 1
    live_causes, saved_causes = json.loads(live.stdout)["causes"], json.loads(saved.stdout)["causes"]
    assert [(c["id"], c["title"], [e["text"] for e in c["evidence"]]) for c in saved_causes] == \
           [(c["id"], c["title"], [e["text"] for e in c["evidence"]]) for c in live_causes]
    assert saved_causes[0]["id"] == "unrecognised.crash"
    again = run_cli(["collect", "flex7", "-o", str(out)], cwd=run)
    assert again.returncode == 2 and "exists and is not empty" in again.stderr


def test_every_fixture_bundle_still_reads() -> None:
    """Manifests written before the collectors existed (schema_version 1) stay readable."""
    bundles = sorted(p.parent for p in FIXTURES.glob("*/manifest.json"))
    if not bundles:
        pytest.skip("no fixture bundles in this checkout")
    for bundle in bundles:
        evidence = evidence_from_bundle(bundle)
        assert evidence.run.mode == "bundle" and evidence.run.id


def test_minimal_manifest_reads(tmp_path: Path) -> None:
    out = write_bundle(tmp_path / "b", Manifest(run={"id": "old"}), {})
    evidence = evidence_from_bundle(out)
    assert evidence.run.id == "old" and evidence.texts == () and evidence.tmux is None and evidence.exits is None


def _members(bundle: Path) -> dict[str, bytes]:
    import tarfile

    with tarfile.open(bundle, "r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.fixture
def leaky_live_run(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A live run whose log, command line and environment hold secrets: the process prints its
    environment and the corpus lines to its log, then stays alive (so the process collector
    records its command line, with --hf_token). Test input, not evidence."""
    from tests.support.secrets import CORPUS

    run = make_run(tmp_path, skip='"gpu", "dmesg", "packages"')
    log = run / "flex7" / "rank2.log"
    hf = "hf_LiVeRuNtOkEnAbCdEfGhIjKlMnOpQrStUv12"
    code = ("import os, sys, time\n"
            "for k in sorted(os.environ):\n"
            "    if k.endswith(('_KEY', '_TOKEN', 'PASSWORD')): print(f'{k}={os.environ[k]}')\n"
            f"print({chr(10).join(line for p in CORPUS for line in p.lines)!r})\n"
            "print('Traceback (most recent call last):')\nprint('RuntimeError: ' + ' '.join(sys.argv[1:]), flush=True)\n"
            "time.sleep(120)\n")
    env = dict(os.environ, WANDB_API_KEY="0a1b2c3d4e5f60718293a4b5c6d7e8f901234567", MLFLOW_TRACKING_PASSWORD="Pw4Mlfl0w!Live")
    script = run / "train.py"
    script.write_text(code)
    with open(log, "w") as handle:
        proc = subprocess.Popen([sys.executable, str(script), "--run", "flex7", "--hf_token", hf], stdout=handle,
                                stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + 20
        while "RuntimeError" not in log.read_text() and time.time() < deadline:
            time.sleep(0.05)
        from tests.support.secrets import ALL_SECRETS

        yield run, [*ALL_SECRETS, hf[3:], env["WANDB_API_KEY"], env["MLFLOW_TRACKING_PASSWORD"]]
    finally:
        proc.kill()  # only the process this fixture started
        proc.wait(10)


def test_collect_masks_every_member_of_the_bundle(leaky_live_run: tuple[Path, list[str]], tmp_path: Path) -> None:
    run, secrets = leaky_live_run
    out = tmp_path / "leaky.tar.gz"
    result = run_cli(["collect", "flex7", "-o", str(out)], cwd=run)
    assert result.returncode == 0, result.stderr
    members = _members(out)
    manifest = json.loads(next(data for name, data in members.items() if name.endswith("/manifest.json")))
    assert manifest["process"]["alive"] and "--hf_token ***" in manifest["process"]["command"]
    logs = {name: data for name, data in members.items() if name.endswith(".log")}
    assert len(logs) == 3
    leaks = [(name, s) for name, data in members.items() for s in secrets if s.encode() in data]
    assert leaks == []
    for name, data in logs.items():  # masked within lines: every line keeps its number
        original = (run / "flex7" / Path(name).name).read_bytes()
        assert data.count(b"\n") == original.count(b"\n")
        if name.endswith("rank0.log"):
            assert data == original  # nothing to mask: byte for byte
    rank2 = next(data for name, data in logs.items() if name.endswith("rank2.log")).decode()
    assert "WANDB_API_KEY=***" in rank2 and "postgres://mlflow:***@db.internal:5432/mlflow" in rank2
    # The masked bundle still diagnoses: the crash of rank 0 is found as it was.
    assert run_cli([str(out), "--format", "json"], cwd=tmp_path).returncode == 1


def test_collect_raw_keeps_the_originals_and_says_so(leaky_live_run: tuple[Path, list[str]], tmp_path: Path) -> None:
    run, secrets = leaky_live_run
    out = tmp_path / "raw"
    result = run_cli(["collect", "flex7", "-o", str(out), "--raw"], cwd=run)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].startswith("diagnose: warning: --raw: the bundle keeps secrets")
    everything = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert [s for s in secrets if s.encode() not in everything] == []
    rank2 = next(out.rglob("rank2.log"))
    assert rank2.read_bytes() == (run / "flex7" / "rank2.log").read_bytes()
