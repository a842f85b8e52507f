"""Command line: options -> call the app -> pick a reporter -> exit code.

Exit codes: 0 ran and found nothing at or above --fail-on; 1 found causes at or above it;
2 usage, config, rule-load or tool error; 130 interrupted. Heavy modules are imported inside
the commands so `diagnose --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from diagnose import __version__
from diagnose.errors import DiagnoseError

if TYPE_CHECKING:
    from diagnose.findings import Diagnosis
    from diagnose.rules import RuleSet

FORMATS = ("terminal", "json", "sarif", "junit", "markdown", "github")
FAIL_ON = ("critical", "error", "warning", "never")
SEVERITY_RANK = {"critical": 0, "error": 1, "warning": 2, "info": 3}
F = TypeVar("F", bound=Callable[..., Any])


class DefaultGroup(click.Group):
    """`diagnose TARGET` runs the hidden `run` command; `diagnose scan ...` etc. work as usual."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("diagnose", "[OPTIONS] RUN_ID|BUNDLE  |  diagnose COMMAND [ARGS]...")


def fail(message: str, details: Sequence[str] = ()) -> None:
    click.echo(f"diagnose: error: {message}", err=True)
    for line in details:
        click.echo(f"  {line}", err=True)
    sys.exit(2)


def guarded(func: F) -> F:
    """Turn our errors into one line and exit 2, Ctrl-C into 130; never show a traceback
    unless -v asked for one."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except DiagnoseError as exc:
            details = exc.details
            if details and exc.message.endswith("in rule files"):
                fail(details[0] + (f"  (and {len(details) - 1} more)" if len(details) > 1 else ""), details[1:])
            fail(exc.message, details)
        except KeyboardInterrupt:
            click.echo("diagnose: interrupted", err=True)
            sys.exit(130)
        except BrokenPipeError:
            sys.exit(0)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # a bug of ours: still one line, exit 2
            if os.environ.get("DIAGNOSE_DEBUG") or kwargs.get("verbose"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (set DIAGNOSE_DEBUG=1 for the traceback)")

    return wrapper  # type: ignore[return-value]


def report_options(func: F) -> F:
    options = [
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True, help="Output format."),
        click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
                     help="Exit 1 when a cause at or above this severity is found."),
        click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True,
                     help="Extra rule folder or file (may repeat); same id overrides a built-in rule."),
        click.option("--since", help="Only evidence at or after this time (ISO time, or 2h / 30m / 1d ago)."),
        click.option("--until", help="Only evidence at or before this time."),
        click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the report to this file."),
        click.option("--engine", type=click.Choice(["auto", "hyperscan", "pure"]), default="auto", hidden=True),
        click.option("-v", "--verbose", is_flag=True, help="Show skipped rules, all evidence, references."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def parse_time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    import re
    import time
    from datetime import datetime

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*(?:ago)?\s*", value)
    if match:
        scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return time.time() - float(match.group(1)) * scale
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise DiagnoseError(f"--{name} {value!r}: expected an ISO time like 2026-11-30T10:00 or an age like 2h") from None
    return moment.timestamp()


def config_rule_dirs(config_path: Path | None) -> list[Path]:
    """Rule folders the config names: they load for every command, not only `diagnose RUN_ID`."""
    from diagnose.configfile import default_config_path

    if config_path is None and default_config_path() is None:
        return []  # no config: do not pay for importing the config machinery
    from diagnose.runs import load_config

    return load_config(config_path).rule_dirs


def load_ruleset(rule_dirs: Sequence[Path], extra_from_config: Sequence[Path] = ()) -> RuleSet:
    from diagnose.rulecache import load_rules_cached  # unchanged rule files: no YAML parsing

    return load_rules_cached([*extra_from_config, *rule_dirs])


def emit(diagnosis: Diagnosis, fmt: str, fail_on: str, output: Path | None, verbose: bool, ruleset: RuleSet | None = None) -> None:
    import io

    from diagnose.report import Format, render, reporter

    chosen = Format(fmt)
    try:
        reporter(chosen)
    except NotImplementedError as exc:
        raise DiagnoseError(str(exc)) from None
    if ruleset is not None and verbose:
        for rule_id, user_path, builtin_path in ruleset.overridden:
            click.echo(f"diagnose: rule {rule_id} from {user_path} overrides the built-in {builtin_path}", err=True)
    rules = ruleset.by_id() if ruleset is not None else None
    # render() masks secrets. Machine formats are rendered whole before anything is written, so
    # a failure (exit 2) never leaves half a SARIF/JUnit file that a later CI step could upload.
    if output is None and chosen is Format.TERMINAL:
        render(chosen, diagnosis, sys.stdout, verbose, rules=rules, fail_on=fail_on)
    else:
        buffer = io.StringIO()
        render(chosen, diagnosis, buffer, verbose, rules=rules, fail_on=fail_on)
        if output is not None:
            try:
                with open(output, "w", encoding="utf-8") as handle:
                    handle.write(buffer.getvalue())
            except OSError as exc:
                raise DiagnoseError(f"{output}: cannot write report ({exc.strerror or exc})") from None
        else:
            sys.stdout.write(buffer.getvalue())
            sys.stdout.flush()
    sys.exit(exit_code(diagnosis, fail_on))


def exit_code(diagnosis: Diagnosis, fail_on: str) -> int:
    if fail_on == "never":
        return 0
    threshold = SEVERITY_RANK[fail_on]
    return 1 if any(SEVERITY_RANK[c.severity] <= threshold for c in diagnosis.causes) else 0


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="diagnose")
def main() -> None:
    """Find why an ML training run died: ranked causes, the lines that prove them, and fixes.

    \b
      diagnose RUN_ID            diagnose a run on this machine (logs, dmesg, tmux, GPUs, ...)
      diagnose BUNDLE            diagnose a saved bundle (directory or .tar.gz)
      diagnose scan PATH...      scan captured files: logs, dmesg, nvidia-smi, pip freeze
      diagnose collect RUN_ID -o OUT   save the evidence as a bundle
      diagnose rules list|show|test|lint|new

    Exit codes: 0 nothing at or above --fail-on, 1 causes found, 2 error, 130 interrupted.
    """


@main.command("run", hidden=True)
@click.argument("target")
@report_options
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Config file (default ./diagnose.toml).")
@click.option("--dir", "search_dirs", type=click.Path(path_type=Path), multiple=True, help="Where to look for the run's files.")
@guarded
def run_command(target: str, fmt: str, fail_on: str, rule_dirs: tuple[Path, ...], since: str | None, until: str | None,
                output: Path | None, engine: str, verbose: bool, config_path: Path | None, search_dirs: tuple[Path, ...]) -> None:
    """Diagnose RUN_ID (a run on this machine) or BUNDLE (a saved bundle)."""
    from diagnose.app import diagnose
    from diagnose.bundle import evidence_from_bundle, is_bundle

    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    path = Path(target)
    if path.exists() and is_bundle(path):
        ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
        evidence = evidence_from_bundle(path)
    else:
        from diagnose.runs import check_run_id, load_config, start_run

        config = load_config(config_path)
        check_run_id(target)
        # Collect in the background while the rules load: the two take about as long.
        pending = start_run(target, config, list(search_dirs), progress=(fmt == "terminal" and sys.stderr.isatty()))
        ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        evidence = pending.evidence()
    diagnosis = diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t)
    emit(diagnosis, fmt, fail_on, output, verbose, ruleset)


@main.command("collect")
@click.argument("run_id")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Bundle to write: a new directory, or a file ending in .tar.gz.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Config file (default ./diagnose.toml).")
@click.option("--dir", "search_dirs", type=click.Path(path_type=Path), multiple=True, help="Where to look for the run's files.")
@click.option("-v", "--verbose", is_flag=True, help="Show gap reasons in full.")
@click.option("--raw", is_flag=True,
              help="Keep secrets (tokens, passwords, keys) in the copies and the manifest; by default they are masked.")
@guarded
def collect_command(run_id: str, out: Path, config_path: Path | None, search_dirs: tuple[Path, ...], verbose: bool,
                    raw: bool) -> None:
    """Save everything about RUN_ID as a bundle (logs, kernel log, tmux, GPUs, packages, ...);
    `diagnose BUNDLE` on any machine then gives the same causes. Secrets found in the copies
    and the manifest are masked (within lines, so line numbers stay) unless --raw."""
    from diagnose.runs import collect_bundle, load_config

    config = load_config(config_path)
    if raw:
        click.echo("diagnose: warning: --raw: the bundle keeps secrets (tokens, passwords, keys) as they were; "
                   "do not share it", err=True)
    written, manifest = collect_bundle(run_id, config, list(search_dirs), out, progress=sys.stderr.isatty(), raw=raw)
    for name, status in manifest.collectors.items():
        reason = f"  {status.reason}" if status.reason else ""
        if reason and not verbose and len(reason) > 120:
            reason = reason[:117] + "..."
        click.echo(f"  {name:<12} {status.status:<8} {status.duration_s:6.2f} s {status.bytes:>12,} B{reason}", err=True)
    click.echo(f"diagnose: wrote {written} ({len(manifest.files)} file(s)); diagnose it with: diagnose {written}", err=True)


@main.command("scan")
@click.argument("paths", nargs=-1, required=True)
@report_options
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Config file naming extra rule folders.")
@guarded
def scan_command(paths: tuple[str, ...], fmt: str, fail_on: str, rule_dirs: tuple[Path, ...], since: str | None,
                 until: str | None, output: Path | None, engine: str, verbose: bool, config_path: Path | None) -> None:
    """Scan captured files and folders: training logs, kernel logs (dmesg), nvidia-smi output,
    package lists (pip freeze / pip list / conda list / collect_env / requirements.txt),
    torchelastic error files, bundles. Kinds are detected; KIND:PATH forces one
    (log, dmesg, nvidia-smi, nvml, packages, elastic-error). .gz/.bz2/.xz are read directly."""
    from diagnose.app import diagnose, evidence_from_paths

    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    evidence = evidence_from_paths(paths)
    diagnosis = diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t)
    emit(diagnosis, fmt, fail_on, output, verbose, ruleset)


@main.group("rules")
def rules_group() -> None:
    """List, show, test, lint and scaffold rules."""


@rules_group.command("list")
@click.option("--category", help="Only this category.")
@click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True, help="Extra rule folder (may repeat).")
@guarded
def rules_list(category: str | None, rule_dirs: tuple[Path, ...]) -> None:
    """List rules: id, category, severity, title."""
    ruleset = load_ruleset(rule_dirs, config_rule_dirs(None))
    rows = sorted((r for r in ruleset.rules if category in (None, r.category)), key=lambda r: r.id)
    width = max((len(r.id) for r in rows), default=10)
    for rule in rows:
        origin = "" if rule.builtin else "  (user)"
        click.echo(f"{rule.id:<{width}}  {rule.category:<12} {rule.severity:<8}  {rule.title}{origin}")
    click.echo(f"{len(rows)} rule(s)", err=True)


@rules_group.command("test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True, help="Extra rule folder (may repeat).")
@click.option("--engine", type=click.Choice(["auto", "hyperscan", "pure"]), default="auto", hidden=True)
@guarded
def rules_test(paths: tuple[Path, ...], rule_dirs: tuple[Path, ...], engine: str) -> None:
    """Run every rule's own tests, and the fixtures (PATHs: fixture folders; default: all)."""
    from diagnose.ruletest import run_fixture_tests, run_rule_tests

    ruleset = load_ruleset(rule_dirs, config_rule_dirs(None))
    failures = run_rule_tests(ruleset, engine=engine, echo=click.echo)
    failures += run_fixture_tests(ruleset, list(paths), engine=engine, echo=click.echo)
    if failures:
        click.echo(f"{failures} failure(s)", err=True)
        sys.exit(1)
    click.echo("all rule tests and fixtures pass", err=True)


@rules_group.command("show")
@click.argument("rule_id")
@click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True, help="Extra rule folder (may repeat).")
@guarded
def rules_show(rule_id: str, rule_dirs: tuple[Path, ...]) -> None:
    """Show every field of the rule RULE_ID, and the file it comes from."""
    from diagnose.ruletools import find_rule, show_rule

    click.echo(show_rule(find_rule(load_ruleset(rule_dirs, config_rule_dirs(None)).rules, rule_id)))


@rules_group.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--fixtures", "fixtures_root", type=click.Path(path_type=Path),
              help="Fixture folder whose healthy-*/ runs a rule must not fire on (default: the built-in fixtures).")
@click.option("--no-healthy", is_flag=True, help="Skip the scan of the healthy fixtures (DL110).")
@click.option("--engine", type=click.Choice(["auto", "hyperscan", "pure"]), default="auto", hidden=True)
@guarded
def rules_lint(paths: tuple[Path, ...], fixtures_root: Path | None, no_healthy: bool, engine: str) -> None:
    """Check rule files (PATHs: files or folders; default: the built-in pack). Codes: docs/rules.md.
    Exit 1 when an error-level issue is found, 0 otherwise."""
    from diagnose.ruletools import lint_paths, lint_summary

    report = lint_paths(list(paths), fixtures_root, healthy=not no_healthy, engine=engine)
    for issue in report.issues:
        click.echo(issue.render())
    click.echo(lint_summary(report), err=True)
    sys.exit(1 if report.errors else 0)


@rules_group.command("new")
@click.argument("rule_id")
@click.option("--from-line", help="A real log line the rule must match; becomes the pattern and the first test.")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=Path("rules"), show_default=True,
              help="Rule folder; the file goes to DIR/<category>/<id>.yaml.")
@guarded
def rules_new(rule_id: str, from_line: str | None, directory: Path) -> None:
    """Scaffold a rule file RULE_ID (<category>.<name>) with tests; never overwrites."""
    from diagnose.ruletools import scaffold_rule

    path = scaffold_rule(rule_id, from_line, directory)
    click.echo(str(path))
    click.echo(f"diagnose: wrote {path}; fill in the TODOs, then: diagnose rules test --rules {directory} && "
               f"diagnose rules lint {path}", err=True)
