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
from diagnose.errors import DiagnoseError, ExitCode
from diagnose.vocab import FAIL_ON, NEVER, Severity

if TYPE_CHECKING:
    from diagnose.engine.findings import Diagnosis
    from diagnose.rules.model import RuleSet

FORMATS = ("terminal", "json", "sarif", "junit", "markdown", "github")
F = TypeVar("F", bound=Callable[..., Any])


class DefaultGroup(click.Group):
    """`diagnose TARGET` runs the hidden `run` command; `diagnose scan ...` etc. work as usual."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("diagnose", "[OPTIONS] RUN_ID|BUNDLE  |  diagnose COMMAND [ARGS]...")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_options(ctx, formatter)
        # The primary gesture's options belong on the first page a user sees.
        run = self.commands.get("run")
        if run is not None:
            sub = click.Context(run, info_name="run", parent=ctx)
            rows = [row for param in run.get_params(sub)
                    if isinstance(param, click.Option) and "--help" not in param.opts
                    and (row := param.get_help_record(sub)) is not None]
            with formatter.section("Options of diagnose RUN_ID|BUNDLE"):
                formatter.write_dl(rows)


def fail(message: str, details: Sequence[str] = ()) -> None:
    from diagnose.evidence.safetext import visible

    # Messages name paths and run ids as given: a newline in one must not start a line of its own
    # (`::error ...` on stderr is a GitHub workflow command), nor an escape reach the terminal.
    click.echo(f"diagnose: error: {visible(message)}", err=True)
    for line in details:
        click.echo(f"  {visible(line)}", err=True)
    sys.exit(ExitCode.ERROR)


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
            sys.exit(ExitCode.INTERRUPTED)
        except BrokenPipeError:
            sys.exit(ExitCode.OK)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # a bug of ours: still one line, exit 2
            if os.environ.get("DIAGNOSE_DEBUG") or kwargs.get("verbose"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (set DIAGNOSE_DEBUG=1 for the traceback)")

    return wrapper  # type: ignore[return-value]


def _apply(func: F, options: Sequence[Callable[[F], F]]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def report_options(func: F) -> F:
    """What a diagnosis is written as, and when it fails the job."""
    return _apply(func, [
        click.option("--format", "formats", multiple=True, metavar="FMT[=FILE]",
                     help=f"Output format, optionally into a file; may repeat (one diagnosis, several reports). "
                          f"FMT: {', '.join(FORMATS)}. Default: terminal."),
        click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
                     help="Exit 1 when a cause at or above this severity is found."),
        click.option("--since", help="Only evidence at or after this time (ISO time, or 2h / 30m / 1d ago)."),
        click.option("--until", help="Only evidence at or before this time."),
        # The report file of a single --format (kept for scripts; --format FMT=FILE says it better).
        click.option("-o", "--output", type=click.Path(path_type=Path), hidden=True),
        click.option("-v", "--verbose", is_flag=True, help="Show skipped rules, all evidence, references."),
    ])


def rule_options(func: F) -> F:
    """Where rules come from: on every command that loads rules."""
    return _apply(func, [
        click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True,
                     help="Extra rule folder or file (may repeat); same id overrides a built-in rule."),
        click.option("--config", "config_path", type=click.Path(path_type=Path),
                     help="Config file (default: ./diagnose.toml, else ~/.config/diagnose/config.toml)."),
    ])


def dev_options(func: F) -> F:
    """For tests and benchmarks: which scanner engine."""
    return _apply(func, [click.option("--engine", type=click.Choice(["auto", "hyperscan", "pure"]), default="auto", hidden=True)])


def parse_formats(formats: Sequence[str], output: Path | None) -> list[tuple[str, Path | None]]:
    """`--format json=out.json --format terminal` -> [(json, out.json), (terminal, None)]."""
    chosen: list[tuple[str, Path | None]] = []
    for spec in formats or ("terminal",):
        name, _, target = spec.partition("=")
        if name not in FORMATS:
            raise click.BadParameter(f"{name!r} is not one of {', '.join(FORMATS)}", param_hint="--format")
        chosen.append((name, Path(target) if target else None))
    if output is not None:
        if len(chosen) != 1 or chosen[0][1] is not None:
            raise click.BadParameter("-o goes with one --format without =FILE; write --format FMT=FILE", param_hint="-o")
        chosen = [(chosen[0][0], output)]
    to_stdout = [name for name, target in chosen if target is None]
    if len(to_stdout) > 1:
        raise click.BadParameter(f"only one format can go to stdout (got {', '.join(to_stdout)}); give the others =FILE",
                                 param_hint="--format")
    return chosen


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
    from diagnose.live.config import default_config_path

    if config_path is None and default_config_path() is None:
        return []  # no config: do not pay for importing the config machinery
    from diagnose.live.config import load_config

    return load_config(config_path).rule_dirs


def load_ruleset(rule_dirs: Sequence[Path], extra_from_config: Sequence[Path] = ()) -> RuleSet:
    from diagnose.rules.cache import load_rules_cached  # unchanged rule files: no YAML parsing

    return load_rules_cached([*extra_from_config, *rule_dirs])


def emit(diagnosis: Diagnosis, formats: Sequence[tuple[str, Path | None]], fail_on: str, verbose: bool,
         ruleset: RuleSet | None = None) -> ExitCode:
    """Write every requested report of one diagnosis; the exit code follows --fail-on."""
    import io

    from diagnose.report.render import Format, render

    if ruleset is not None and verbose:
        for rule_id, user_path, builtin_path in ruleset.overridden:
            click.echo(f"diagnose: rule {rule_id} from {user_path} overrides the built-in {builtin_path}", err=True)
    rules = ruleset.by_id() if ruleset is not None else None
    # render() masks secrets. Every report is rendered whole before anything is written, so a
    # failure (exit 2) never leaves half a SARIF/JUnit file that a later CI step could upload.
    rendered: list[tuple[Format, Path | None, str]] = []
    for name, target in formats:
        chosen = Format(name)
        if target is None and chosen is Format.TERMINAL:
            rendered.append((chosen, None, ""))  # streamed straight to the terminal below
            continue
        buffer = io.StringIO()
        render(chosen, diagnosis, buffer, verbose, rules=rules, fail_on=fail_on)
        rendered.append((chosen, target, buffer.getvalue()))
    for chosen, target, text in sorted(rendered, key=lambda item: item[1] is None):  # files first
        if target is not None:
            try:
                with open(target, "w", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError as exc:
                raise DiagnoseError(f"{target}: cannot write report ({exc.strerror or exc})") from None
        elif chosen is Format.TERMINAL:
            render(chosen, diagnosis, sys.stdout, verbose, rules=rules, fail_on=fail_on)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    return exit_code(diagnosis, fail_on)


def exit_code(diagnosis: Diagnosis, fail_on: str) -> ExitCode:
    if fail_on == NEVER:
        return ExitCode.OK
    failed = any(Severity(c.severity).at_least(fail_on) for c in diagnosis.causes)
    return ExitCode.FINDINGS if failed else ExitCode.OK


EPILOG = ("`diagnose RUN_ID --help` lists the options of a run. A run named like a command "
          "(scan, rules, collect, ...) is diagnosed with `diagnose run NAME`.")


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EPILOG)
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


def host_options(func: F) -> F:
    """Where the run lives when it is not here: over ssh, behind an exec prefix."""
    func = click.option("--exec", "exec_prefix", metavar="PREFIX",
                        help="Run every command on the host behind this prefix, e.g. 'pct exec 200 --', "
                             "'docker exec -i NAME', 'kubectl exec -i POD --', 'sudo -u USER'.")(func)
    return click.option("--host", "host", metavar="[USER@]HOST[:PORT]",
                        help="The run lives on this machine, reached with OpenSSH (your ~/.ssh/config and "
                             "known_hosts; never a prompt). Its logs are searched there.")(func)


def search_dir_option(func: F) -> F:
    func = click.option("--stall-after", "stall_after", default="10m", show_default=True, metavar="AGE",
                        help="A live run silent this long (2h / 30m / 600s) with little CPU counts as stalled.")(func)
    return click.option("--dir", "search_dirs", type=click.Path(path_type=Path), multiple=True,
                        help="Where to look for the run's files (may repeat; default: the working directory).")(func)


def parse_age(value: str, name: str) -> float:
    """2h / 30m / 600s / 600 -> seconds."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    if not match or float(match.group(1)) <= 0:
        raise DiagnoseError(f"--{name} {value!r}: expected an age like 10m, 2h or 600s")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


@main.command("run")
@click.argument("target", metavar="RUN_ID|BUNDLE")
@report_options
@rule_options
@search_dir_option
@host_options
@dev_options
@guarded
@click.pass_context
def run_command(ctx: click.Context, target: str, formats: tuple[str, ...], fail_on: str, since: str | None,
                until: str | None, output: Path | None, verbose: bool, rule_dirs: tuple[Path, ...],
                config_path: Path | None, search_dirs: tuple[Path, ...], stall_after: str, host: str | None,
                exec_prefix: str | None, engine: str) -> None:
    """Diagnose RUN_ID (a run on this machine) or BUNDLE (a saved bundle). `diagnose RUN_ID` is
    the short form."""
    from diagnose.app import diagnose
    from diagnose.evidence.bundle import evidence_from_bundle
    from diagnose.evidence.inputs import is_bundle
    from diagnose.live.runs import path_exists

    chosen = parse_formats(formats, output)
    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    path = Path(target)
    if host is None and exec_prefix is None and path_exists(path) and is_bundle(path):
        evidence = evidence_from_bundle(path)  # first: a bad bundle is refused without waiting on the rules
        ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    else:
        from diagnose.app import start_run
        from diagnose.live.config import load_config
        from diagnose.live.runs import check_run_id

        config = load_config(config_path)
        check_run_id(target)
        terminal = any(name == "terminal" and to is None for name, to in chosen)
        progress = terminal and sys.stderr.isatty()
        age = parse_age(stall_after, "stall-after")
        if host is not None or config.host:
            from diagnose.app import log_patterns, open_host

            # A remote run's logs are searched there with the rules' patterns: the rules first.
            ruleset = load_ruleset(rule_dirs, config.rule_dirs)
            remote = open_host(config, host, exec_prefix)
            pending = start_run(target, config, list(search_dirs), progress=progress, stall_after=age, host=remote,
                                log_patterns=log_patterns(ruleset), engine=engine)
        else:
            if exec_prefix is not None:
                raise DiagnoseError("--exec needs --host (or target in the [host] table of the config)")
            # Collect in the background while the rules load: the two take about as long.
            pending = start_run(target, config, list(search_dirs), progress=progress, stall_after=age)
            ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        evidence = pending.evidence()
    diagnosis = diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t,
                         stall_after=parse_age(stall_after, "stall-after"))
    ctx.exit(emit(diagnosis, chosen, fail_on, verbose, ruleset))


@main.command("collect")
@click.argument("run_id")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Bundle to write: a new directory, or a file ending in .tar.gz.")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Config file (default: ./diagnose.toml, else ~/.config/diagnose/config.toml).")
@search_dir_option
@host_options
@click.option("-v", "--verbose", is_flag=True, help="Show gap reasons in full.")
@click.option("--raw", is_flag=True,
              help="Keep secrets (tokens, passwords, keys) in the copies and the manifest; by default they are masked.")
@guarded
def collect_command(run_id: str, out: Path, config_path: Path | None, search_dirs: tuple[Path, ...], stall_after: str,
                    host: str | None, exec_prefix: str | None, verbose: bool, raw: bool) -> None:
    """Save everything about RUN_ID as a bundle (logs, kernel log, tmux, GPUs, packages, ...);
    `diagnose BUNDLE` on any machine then gives the same causes. Secrets found in the copies
    and the manifest are masked (within lines, so line numbers stay) unless --raw."""
    from diagnose.app import collect_bundle
    from diagnose.evidence.safetext import visible
    from diagnose.live.config import load_config

    config = load_config(config_path)
    if raw:
        click.echo("diagnose: warning: --raw: the bundle keeps secrets (tokens, passwords, keys) as they were; "
                   "do not share it", err=True)
    remote = ruleset = None
    if host is not None or config.host:
        from diagnose.app import open_host
        from diagnose.live.runs import check_run_id

        check_run_id(run_id)
        # The logs stay where they are: the bundle keeps the lines these rules may match (and
        # the head and tail); `diagnose BUNDLE` with other rules says so.
        ruleset = load_ruleset((), config.rule_dirs)
        remote = open_host(config, host, exec_prefix)
    elif exec_prefix is not None:
        raise DiagnoseError("--exec needs --host (or target in the [host] table of the config)")
    written, manifest = collect_bundle(run_id, config, list(search_dirs), out, progress=sys.stderr.isatty(), raw=raw,
                                       stall_after=parse_age(stall_after, "stall-after"), host=remote, rules=ruleset)
    for name, status in manifest.collectors.items():
        reason = f"  {visible(status.reason)}" if status.reason else ""  # reasons name paths found on disk
        if reason and not verbose and len(reason) > 120:
            reason = reason[:117] + "..."
        click.echo(f"  {name:<12} {status.status:<8} {status.duration_s:6.2f} s {status.bytes:>12,} B{reason}", err=True)
    click.echo(f"diagnose: wrote {written} ({len(manifest.files)} file(s)); diagnose it with: diagnose {written}", err=True)


@main.command("scan")
@click.argument("paths", nargs=-1, required=True)
@report_options
@rule_options
@dev_options
@guarded
@click.pass_context
def scan_command(ctx: click.Context, paths: tuple[str, ...], formats: tuple[str, ...], fail_on: str, since: str | None,
                 until: str | None, output: Path | None, verbose: bool, rule_dirs: tuple[Path, ...],
                 config_path: Path | None, engine: str) -> None:
    """Scan captured files and folders: training logs, kernel logs (dmesg), nvidia-smi output,
    package lists (pip freeze / pip list / conda list / collect_env / requirements.txt),
    torchelastic error files, bundles. Kinds are detected; KIND:PATH forces one
    (log, dmesg, nvidia-smi, nvml, packages, elastic-error). .gz/.bz2/.xz are read directly.
    `-` reads standard input (`ssh host cat train.log | diagnose scan -`)."""
    from diagnose.app import diagnose
    from diagnose.evidence.inputs import evidence_from_paths

    chosen = parse_formats(formats, output)
    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    evidence = evidence_from_paths(paths)
    diagnosis = diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t)
    ctx.exit(emit(diagnosis, chosen, fail_on, verbose, ruleset))


@main.group("rules")
def rules_group() -> None:
    """List, show, test, lint and scaffold rules. `test` and `lint` take rule files or folders the
    same way (PATH... or --rules DIR) and fixtures with --fixtures DIR."""


@rules_group.command("list")
@click.option("--category", help="Only this category.")
@rule_options
@guarded
def rules_list(category: str | None, rule_dirs: tuple[Path, ...], config_path: Path | None) -> None:
    """List rules: id, category, severity, title."""
    ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    rows = sorted((r for r in ruleset.rules if category in (None, r.category)), key=lambda r: r.id)
    width = max((len(r.id) for r in rows), default=10)
    for rule in rows:
        origin = "" if rule.builtin else "  (user)"
        click.echo(f"{rule.id:<{width}}  {rule.category:<12} {rule.severity:<8}  {rule.title}{origin}")
    click.echo(f"{len(rows)} rule(s)", err=True)


def fixtures_option(help_text: str) -> Callable[[F], F]:
    return click.option("--fixtures", "fixtures", type=click.Path(path_type=Path), multiple=True, help=help_text)


def _split_fixture_paths(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """PATHs that are fixture folders (an expect.yaml inside), told apart from rule paths: the old
    `rules test FIXTURE` form still works."""
    rules = [p for p in paths if not (p / "expect.yaml").is_file()]
    fixtures = [p for p in paths if (p / "expect.yaml").is_file()]
    return rules, fixtures


@rules_group.command("test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@rule_options
@fixtures_option("Fixture folder, or a folder of them, whose expected ranking must hold (default: the built-in ones).")
@dev_options
@guarded
def rules_test(paths: tuple[Path, ...], rule_dirs: tuple[Path, ...], config_path: Path | None,
               fixtures: tuple[Path, ...], engine: str) -> None:
    """Run the own tests of every loaded rule (the built-in pack, PATHs: rule files or folders,
    --rules, the config's), and the fixtures' expected rankings."""
    from diagnose.ruletools.selftest import expand_fixtures, run_fixture_tests, run_rule_tests

    rule_paths, fixture_paths = _split_fixture_paths(paths)
    ruleset = load_ruleset([*rule_paths, *rule_dirs], config_rule_dirs(config_path))
    failures = run_rule_tests(ruleset, engine=engine, echo=click.echo)
    failures += run_fixture_tests(ruleset, expand_fixtures([*fixture_paths, *fixtures]), engine=engine, echo=click.echo)
    if failures:
        click.echo(f"{failures} failure(s)", err=True)
        sys.exit(ExitCode.FINDINGS)
    click.echo("all rule tests and fixtures pass", err=True)


@rules_group.command("show")
@click.argument("rule_id")
@rule_options
@guarded
def rules_show(rule_id: str, rule_dirs: tuple[Path, ...], config_path: Path | None) -> None:
    """Show every field of the rule RULE_ID, and the file it comes from."""
    from diagnose.ruletools.tools import find_rule, show_rule

    click.echo(show_rule(find_rule(load_ruleset(rule_dirs, config_rule_dirs(config_path)).rules, rule_id)))


@rules_group.command("lint")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@rule_options
@fixtures_option("Fixture folder whose healthy-*/ runs a rule must not fire on (default: the built-in fixtures).")
@click.option("--no-healthy", is_flag=True, help="Skip the scan of the healthy fixtures (DL110).")
@dev_options
@guarded
def rules_lint(paths: tuple[Path, ...], rule_dirs: tuple[Path, ...], config_path: Path | None,
               fixtures: tuple[Path, ...], no_healthy: bool, engine: str) -> None:
    """Check rule files (PATHs or --rules: files or folders; default: the built-in pack and the
    config's rule folders). Codes: docs/rules.md. Exit 1 when an error-level issue is found."""
    from diagnose.ruletools.tools import lint_paths, lint_summary

    targets = [*paths, *rule_dirs] or ([*config_rule_dirs(config_path)] if config_path else [])
    if len(fixtures) > 1:
        raise DiagnoseError("rules lint: give --fixtures once (the folder holding the healthy-*/ fixtures)")
    report = lint_paths(targets, fixtures[0] if fixtures else None, healthy=not no_healthy, engine=engine)
    for issue in report.issues:
        click.echo(issue.render())
    click.echo(lint_summary(report), err=True)
    sys.exit(ExitCode.FINDINGS if report.errors else ExitCode.OK)


@rules_group.command("new")
@click.argument("rule_id")
@click.option("--from-line", help="A real log line the rule must match; becomes the pattern and the first test.")
@click.option("--into", "--dir", "directory", type=click.Path(path_type=Path), default=Path("rules"), show_default=True,
              help="Rule folder; the file goes to INTO/<category>/<id>.yaml.")
@guarded
def rules_new(rule_id: str, from_line: str | None, directory: Path) -> None:
    """Scaffold a rule file RULE_ID (<category>.<name>) with tests; never overwrites."""
    from diagnose.ruletools.tools import scaffold_rule

    path = scaffold_rule(rule_id, from_line, directory)
    click.echo(str(path))
    click.echo(f"diagnose: wrote {path}; fill in the TODOs, then: diagnose rules test {directory} && "
               f"diagnose rules lint {path}", err=True)
