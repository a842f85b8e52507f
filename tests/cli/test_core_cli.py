"""CLI contract: bad input gives one clear line and exit 2; findings exit 1; clean exits 0."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.paths import DATA

WANDB_LOG = DATA / "logs" / "wandb-settings-rejected.log"


def assert_one_line_error(result: object, needle: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)  # type: ignore[attr-defined]
    err = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(err) == 1, err
    assert err[0].startswith("diagnose: error: ") and needle in err[0], err
    assert "Traceback" not in result.stderr  # type: ignore[attr-defined]


def test_missing_path(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["scan", str(tmp_path / "nope.log")]), "no such file or directory")


def test_binary_file(tmp_path: Path) -> None:
    binary = tmp_path / "model.log"
    binary.write_bytes(b"\x00\x01\x02PK\x03\x04" * 1000)
    assert_one_line_error(run_cli(["scan", str(binary)]), "binary file")


def test_empty_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run_cli(["scan", str(empty)]), "empty directory")


def test_directory_without_evidence(tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    folder.mkdir()
    (folder / "model.pt").write_bytes(b"\x00" * 10)
    assert_one_line_error(run_cli(["scan", str(folder)]), "no log, kernel log")


def test_unreadable_gzip(tmp_path: Path) -> None:
    bad = tmp_path / "train.log.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage-not-gzip")
    assert_one_line_error(run_cli(["scan", str(bad)]), "train.log.gz")


def test_invalid_utf8_in_log_is_tolerated(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(WANDB_LOG.read_bytes().replace(b"Initialising wandb", b"Initialising \xff\xfe wandb"))
    result = run_cli(["scan", str(log), "--format", "json"])
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["causes"][0]["id"] == "library.wandb-settings-rejected"


def test_gz_log_read_transparently_and_kind_forced(tmp_path: Path) -> None:
    log = tmp_path / "captured.txt.gz"
    with gzip.open(log, "wb") as handle:
        handle.write(WANDB_LOG.read_bytes())
    result = run_cli(["scan", f"log:{log}", "--format", "json"])
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "library.wandb-settings-rejected"
    assert data["causes"][0]["evidence"][0]["line"] > 1


def test_fail_on_levels(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(WANDB_LOG, log)
    assert run_cli(["scan", str(log), "--fail-on", "never"]).returncode == 0
    assert run_cli(["scan", str(log), "--fail-on", "critical"]).returncode == 0  # the cause is an error, not critical
    assert run_cli(["scan", str(log), "--fail-on", "error"]).returncode == 1


def test_a_log_that_just_stops_is_said_not_failed(tmp_path: Path) -> None:
    """Only INFO lines and no end: not silent (the header says it ended without an error), but no
    cause: scanned alone, nothing suggests a kill (issue 31: most finished runs end so)."""
    log = tmp_path / "train.log"
    lines = WANDB_LOG.read_text().splitlines()[:5]  # the real log up to the crash: only INFO lines
    log.write_text("\n".join(lines) + "\n")
    result = run_cli(["scan", str(log)])
    assert result.returncode == 0, result.stdout
    assert "ends without an error" in " ".join(result.stdout.split())
    assert "run.stopped-without-error" not in result.stdout


def test_log_text_is_not_rich_markup(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    text = WANDB_LOG.read_text().replace("Extra inputs are not permitted", "[bold red]Extra inputs are not permitted")
    log.write_text(text)
    result = run_cli(["scan", str(log)], env={"COLUMNS": "300"})
    assert "[bold red]Extra inputs are not permitted" in result.stdout


def test_bad_time_option(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    shutil.copy(WANDB_LOG, log)
    assert_one_line_error(run_cli(["scan", str(log), "--since", "yesterday-ish"]), "--since")


def test_help_does_not_import_the_engine() -> None:
    import subprocess
    import sys

    code = ("import sys; from diagnose.cli import main\n"
            "try:\n main(['--help'])\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('regex','rich','yaml','hyperscan') or m in ('diagnose.engine.evaluate','diagnose.engine.scan')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_config_rule_folder_loads_for_scan_and_rules_list(tmp_path: Path) -> None:
    rules = tmp_path / "team-rules" / "demo"
    rules.mkdir(parents=True)
    (rules / "demo.shard-check.yaml").write_text(
        "id: demo.shard-check\ntitle: Shard check failed\ncategory: demo\nrole: root\nseverity: error\n"
        "confidence: 0.9\nwhen:\n  any:\n    - log: 'Initialising wandb'\nexplanation: x\nfix: [y]\n"
    )
    (tmp_path / "diagnose.toml").write_text('rules = ["team-rules"]\n')
    log = tmp_path / "train.log"
    shutil.copy(WANDB_LOG, log)
    listed = run_cli(["rules", "list", "--category", "demo"], cwd=tmp_path)
    assert "demo.shard-check" in listed.stdout
    scanned = run_cli(["scan", str(log), "--format", "json"], cwd=tmp_path)
    assert "demo.shard-check" in [c["id"] for c in json.loads(scanned.stdout)["causes"]]
    below = run_cli(["scan", str(log), "--format", "json"], cwd=tmp_path / "team-rules")  # found in a parent folder
    assert "demo.shard-check" in [c["id"] for c in json.loads(below.stdout)["causes"]]
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    outside.mkdir()
    elsewhere = run_cli(["scan", str(log), "--format", "json"], cwd=outside)
    assert "demo.shard-check" not in [c["id"] for c in json.loads(elsewhere.stdout)["causes"]]


def test_failed_nvidia_smi_output_is_scanned_for_driver_errors(tmp_path: Path) -> None:
    # What nvidia-smi printed in a public report (https://github.com/tinygrad/open-gpu-kernel-modules/issues/47).
    smi = tmp_path / "nvidia-smi.txt"
    smi.write_text("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n")
    result = run_cli(["scan", str(smi), "--format", "json"])
    data = json.loads(result.stdout)
    assert data["causes"][0]["id"] == "gpu.nvml-driver-mismatch"
    assert any(g["source"] == "gpu" and "no GPU state" in g["reason"] for g in data["gaps"])


def test_a_pasted_kernel_line_is_not_a_package_list(tmp_path: Path) -> None:
    # A syslog Xid line as a user pasted it (https://pastebin.com/fTNHmgzB, quoted in a public report):
    # its "faulted @ 0x..." once made the sniffer take it for a pip freeze "name @ url" line.
    from diagnose.evidence.sniff import sniff

    line = ("- May 13 17:19:01 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr 10000000. MMU Fault: "
            "ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type FAULT_PDE ACCESS_TYPE_READ")
    path = tmp_path / "report.txt"
    path.write_text(line + "\n")
    assert sniff(path, path.read_bytes()).value == "log"
    result = run_cli(["scan", str(path), "--format", "json"])
    assert "gpu.xid-application" in [c["id"] for c in json.loads(result.stdout)["causes"]]
