"""diagnose.toml: where it is looked for, {run} templates, strict validation (one line with the
file and line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.errors import ConfigError
from diagnose.live.config import check_template, default_config_path, load_config
from diagnose.live.discovery import resolve
from tests.support.cli import run_cli


def write(tmp_path: Path, text: str, name: str = "diagnose.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    return info.value.message


def test_unknown_key_names_file_and_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[run]\nlogs = "x.log"\n\nlgos = "y.log"\n')
    assert message.startswith(f"{tmp_path / 'diagnose.toml'}:4: unknown key 'lgos' in [run]")
    assert "known:" in message and "logs" in message


def test_unknown_top_level_key_and_table(tmp_path: Path) -> None:
    assert ":1: unknown key 'rule'" in error_of(tmp_path, 'rule = ["x"]\n')
    assert ":3: unknown key 'colect'" in error_of(tmp_path, '[run]\ndir = "/x"\n[colect]\ntimeout = 3\n')


def test_unknown_key_in_a_runs_table(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[run]\ndir = "/w"\n\n[runs."flex*"]\ndir = "/d"\ncheckpoint = "c"\n')
    assert message.startswith(f"{tmp_path / 'diagnose.toml'}:6: unknown key 'checkpoint' in [runs.flex*]")


def test_bad_templates(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[run]\nlogs = ["ok_{run}.log", "bad_{rnu}.log"]\n')
    assert message.startswith(f"{tmp_path / 'diagnose.toml'}:2: logs: bad template 'bad_{{rnu}}.log': unknown field {{rnu}}")
    assert ":2: checkpoints: bad template" in error_of(tmp_path, '[run]\ncheckpoints = "ckpt/{run"\n')
    assert "takes no format spec" in error_of(tmp_path, '[run]\ntmux_session = "{run!r}"\n')
    assert check_template("logs/{run}_{user}@{host}.log") is None
    assert check_template("{{literal}}/{run}") is None


def test_wrong_types(tmp_path: Path) -> None:
    assert ":2: timeout must be a positive number" in error_of(tmp_path, '[collect]\ntimeout = "10"\n')
    assert ":2: skip must be a list of collector names" in error_of(tmp_path, '[collect]\nskip = ["gpus"]\n')
    assert ":2: dir in [run] must be a string" in error_of(tmp_path, "[run]\ndir = 3\n")
    assert "logs in [run] must be a string or a list of strings" in error_of(tmp_path, "[run]\nlogs = [1]\n")


def test_invalid_toml_gives_its_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, '[run]\ndir = "/x"\nlogs = [\n')
    assert message.startswith(f"{tmp_path / 'diagnose.toml'}:") and "invalid TOML" in message


def test_bad_config_on_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    write(tmp_path, '[run]\nlogs = "logs/{rnu}.log"\n')
    result = run_cli(["flex7"], cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("diagnose: error: ") and "diagnose.toml:2:" in lines[0]
    missing = run_cli(["flex7", "--config", str(tmp_path / "nope.toml")], cwd=tmp_path)
    assert missing.returncode == 2 and "nope.toml: no such config file" in missing.stderr
    collect = run_cli(["collect", "flex7", "-o", str(tmp_path / "b")], cwd=tmp_path)
    assert collect.returncode == 2 and "diagnose.toml:2:" in collect.stderr


def test_where_the_config_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    xdg = tmp_path / "xdg"
    (xdg / "diagnose").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    assert default_config_path(work) is None
    user = write(xdg / "diagnose", '[run]\ntmux_session = "u-{run}"\n', "config.toml")
    assert default_config_path(work) == user
    local = write(work, '[run]\ntmux_session = "l-{run}"\n')
    assert default_config_path(work) == local
    assert load_config(None, work).defaults["tmux_session"] == "l-{run}"


def test_templates_render_and_runs_sections_override(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, (
        'rules = ["team-rules"]\n'
        "[collect]\ntimeout = 4\nbudget = 9\nskip = [\"gpu\"]\n"
        '[run]\ndir = "runs/{run}"\nlogs = ["train_{run}.log", "rank*.log"]\ntmux_session = "{run}"\nvenv = "/opt/venvs/{run}"\n'
        '[runs."flex*"]\ncheckpoints = "/ckpt/{run}"\ntmux_session = "t-{run}"\n'
    )))
    assert cfg.rule_dirs == [(tmp_path / "team-rules").resolve()]
    assert (cfg.timeout, cfg.budget, cfg.skip) == (4.0, 9.0, ("gpu",))
    flex = resolve("flex7", cfg, [])
    assert flex.section == "flex*" and flex.configured
    assert flex.workdir == str(tmp_path / "runs" / "flex7")
    assert flex.expected_logs == [str(tmp_path / "runs/flex7/train_flex7.log"), str(tmp_path / "runs/flex7/rank*.log")]
    assert flex.checkpoint_dir == "/ckpt/flex7"
    assert flex.tmux_session == "t-flex7" and flex.launcher == "tmux"
    assert flex.python == "/opt/venvs/flex7/bin/python" and flex.python_source == "config venv"
    other = resolve("base3", cfg, [])
    assert other.section is None and other.tmux_session == "base3" and other.checkpoint_dir is None


def test_run_id_must_be_a_name(tmp_path: Path) -> None:
    result = run_cli(["../etc"], cwd=tmp_path)
    assert result.returncode == 2 and "not a run id" in result.stderr
    log = tmp_path / "some.log"
    log.write_text("")
    as_path = run_cli([str(log)], cwd=tmp_path)
    assert as_path.returncode == 2 and "diagnose scan" in as_path.stderr
