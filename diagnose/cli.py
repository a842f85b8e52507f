"""Command line: options -> call the app -> pick a reporter -> exit code.

Exit codes: 0 ran and found nothing at or above --fail-on; 1 found causes at or above it;
2 usage, config, rule-load or tool error; 130 interrupted. Heavy modules are imported inside
the commands so `diagnose --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from diagnose import __version__
from diagnose.errors import DiagnoseError, ExitCode, RuleError
from diagnose.vocab import FAIL_ON, NEVER, Severity

if TYPE_CHECKING:
    from diagnose.engine.findings import Diagnosis
    from diagnose.rules.model import RuleSet

FORMATS = ("terminal", "json", "sarif", "junit", "markdown", "github", "html")
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
            if isinstance(exc, RuleError) and details:  # lead with the first problem, file:line first
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
        click.option("-v", "--verbose", is_flag=True, help="Show skipped rules, skipped files, all evidence, references."),
        click.option("-q", "--quiet", is_flag=True, help="The terminal report is one summary line (other formats unchanged)."),
        click.option("--color", "--colour", "color", type=click.Choice(["auto", "always", "never"]), default="auto",
                     show_default=True, help="Colour in the terminal report; auto: on a terminal, off with NO_COLOR, "
                                             "on with FORCE_COLOR (CI logs)."),
        click.option("--sarif-category", "sarif_category", envvar="DIAGNOSE_SARIF_CATEGORY", metavar="NAME",
                     help="SARIF automationDetails.id (one per CI job; default in GitHub Actions: "
                          "diagnose/WORKFLOW/JOB plus $DIAGNOSE_MATRIX)."),
    ])


def rule_options(func: F) -> F:
    """Where rules come from: on every command that loads rules."""
    return _apply(func, [
        click.option("--rules", "rule_dirs", type=click.Path(path_type=Path), multiple=True,
                     help="Extra rule folder or file (may repeat); same id overrides a built-in rule."),
        click.option("--config", "config_path", type=click.Path(path_type=Path),
                     help="Config file (default: the nearest diagnose.toml, or pyproject.toml with [tool.diagnose], "
                          "here or in a folder above; else ~/.config/diagnose/config.toml)."),
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


def wants_timeline(formats: Sequence[tuple[str, Path | None]]) -> bool:
    """Whether a chosen format draws the run's timeline: only then is it built."""
    from diagnose.report.render import Format, draws_timeline

    return draws_timeline(Format(name) for name, _ in formats)


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


def resolve_color(choice: str, env: Mapping[str, str] | None = None) -> bool | None:
    """--color always/never decide; auto: NO_COLOR (any value) turns colour off, FORCE_COLOR
    (other than 0/false) turns it on, else None: a terminal gets colour (no-color.org,
    force-color.org)."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    environ = os.environ if env is None else env
    if environ.get("NO_COLOR"):
        return False
    force = environ.get("FORCE_COLOR")
    if force is not None and force.strip().lower() not in ("0", "false", "no", "off"):
        return True
    return None


def emit(diagnosis: Diagnosis, formats: Sequence[tuple[str, Path | None]], fail_on: str, verbose: bool,
         ruleset: RuleSet | None = None, **options: Any) -> ExitCode:
    """Write every requested report of one diagnosis; the exit code follows --fail-on. options:
    what some formats take (color and quiet for the terminal, category for SARIF)."""
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
        render(chosen, diagnosis, buffer, verbose, rules=rules, fail_on=fail_on, **options)
        rendered.append((chosen, target, buffer.getvalue()))
    for chosen, target, text in sorted(rendered, key=lambda item: item[1] is None):  # files first
        if target is not None:
            try:
                with open(target, "w", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError as exc:
                raise DiagnoseError(f"{target}: cannot write report ({exc.strerror or exc})") from None
        elif chosen is Format.TERMINAL:
            render(chosen, diagnosis, sys.stdout, verbose, rules=rules, fail_on=fail_on, **options)
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
      diagnose launch RUN_ID -- CMD    start a run detached, supervised; say within seconds if it started
      diagnose watch RUN_ID      follow a run; diagnose it when it ends or stalls
      diagnose runs              the runs diagnose launch started, and their state
      diagnose rules list|show|test|lint|new|docs|schema

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
    func = click.option("--stall-after", "stall_after", default=None, metavar="AGE",
                        help="A live run silent this long (2h / 30m / 600s) with little CPU counts as stalled. "
                             "Default: 10 x the run's usual gap between its progress lines (2 min to 2 h), "
                             "10m when its log shows none.")(func)
    return click.option("--dir", "search_dirs", type=click.Path(path_type=Path), multiple=True,
                        help="Where to look for the run's files (may repeat; default: the working directory).")(func)


def optional_age(value: str | None, name: str) -> float | None:
    """parse_age, or None when the option was not given (the engine then goes by the run's cadence)."""
    return None if value is None else parse_age(value, name)


def parse_age(value: str, name: str) -> float:
    """2h / 30m / 600s / 600 -> seconds."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    if not match or float(match.group(1)) <= 0:
        raise DiagnoseError(f"--{name} {value!r}: expected an age like 10m, 2h or 600s")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def node_options(func: F) -> F:
    """Several nodes: named, from a file, or a Slurm job's."""
    return _apply(func, [
        click.option("--hosts", "hosts", metavar="NODE,...",
                     help="Collect the run on these nodes, in parallel: [USER@]HOST[:PORT] or an ssh config alias (over "
                          "ssh, with the config's [host] settings and --exec), localhost or this machine's name, or "
                          "NAME=DIR (a node whose files are under DIR here)."),
        click.option("--hostfile", type=click.Path(path_type=Path), help="File naming the nodes, one a line."),
        click.option("--slurm-job", "slurm_job", metavar="JOBID",
                     help="The run is this Slurm job (default inside an allocation: $SLURM_JOB_ID): its accounting "
                          "record, output files and every node of it."),
    ])


def node_patterns(ruleset: RuleSet, nodes: Sequence[Any] | None, slurm_job: str | None) -> Any:
    """The pattern set an ssh node's logs are searched with where they are (a Slurm job's nodes
    may be ssh ones); None when every node is read here."""
    from diagnose.app import log_patterns
    from diagnose.live.fanout import SshNode

    if slurm_job is None and not any(isinstance(n, SshNode) for n in nodes or ()):
        return None
    return log_patterns(ruleset)


def chosen_hosts(hosts: str | None, hostfile: Path | None, config_path: Path | None = None,
                 exec_prefix: str | None = None) -> list[Any] | None:
    """The node of every name given by --hosts / --hostfile (the ssh ones reached with the
    config's [host] settings and --exec); None when neither was given."""
    if hosts is None and hostfile is None:
        return None
    from diagnose.live.config import load_config
    from diagnose.live.fanout import host_for, read_hostfile

    table = dict(load_config(config_path).host)
    table.pop("target", None)  # the nodes are the targets

    names = [n for n in (hosts or "").split(",") if n.strip()] + (read_hostfile(hostfile) if hostfile else [])
    if not names:
        raise DiagnoseError("--hosts: names no host")
    found: list[Any] = []
    for name in dict.fromkeys(n.strip() for n in names):
        host = host_for(name, table, exec_prefix)
        if any(h.name == host.name for h in found):
            continue  # localhost and this machine's name are one node
        found.append(host)
    return found


def looks_like_bundle_path(target: str) -> bool:
    """Whether a missing target was meant as a path: it names a folder (a slash) or an archive."""
    return "/" in target or target.lower().endswith((".tar.gz", ".tgz", ".tar")) or target.startswith("~")


def check_dirs(search_dirs: Sequence[Path]) -> None:
    """--dir must name folders that are there: a typo must not turn into "nothing relates to the run"."""
    for folder in search_dirs:
        try:
            if not folder.exists():
                raise DiagnoseError(f"--dir {folder}: no such directory")
            if not folder.is_dir():
                raise DiagnoseError(f"--dir {folder}: not a directory")
        except OSError as exc:
            raise DiagnoseError(f"--dir {folder}: cannot look into it ({exc.strerror or exc})") from None


def check_dirs_on(remote: Any, search_dirs: Sequence[Path]) -> None:
    """check_dirs on the far side of --host (through its exec prefix): the run's folders are there."""
    where = getattr(remote, "name", "the host")
    for folder in search_dirs:
        try:
            found = remote.stat(str(folder))
        except PermissionError:
            raise DiagnoseError(f"--dir {folder}: cannot look into it on {where} (permission denied)") from None
        if found is None:
            raise DiagnoseError(f"--dir {folder}: no such directory on {where}")
        if not found.is_dir:
            raise DiagnoseError(f"--dir {folder}: not a directory on {where}")


def timed_diagnose(evidence: Any, ruleset: RuleSet, **kwargs: Any) -> Diagnosis:
    """app.diagnose with a progress line on stderr when it takes over a second on a terminal."""
    from diagnose.app import diagnose

    with delayed_status(evidence_label(evidence)):
        return diagnose(evidence, ruleset, **kwargs)


def evidence_label(evidence: Any) -> str:
    count = len(evidence.texts)
    return f"scanning {count} file(s)" if count != 1 else f"scanning {evidence.texts[0].display}"


def delayed_status(label: str, delay: float = 1.0) -> Any:
    """A rich spinner on stderr, shown only when the work lasts past `delay` seconds and stderr is a
    terminal (never in a pipe or a CI log; DIAGNOSE_PROGRESS=0 turns it off)."""
    import contextlib

    from diagnose.report._progress import DelayedStatus

    with contextlib.suppress(ValueError):  # DIAGNOSE_PROGRESS_AFTER: the delay in seconds (tests show it at once)
        delay = float(os.environ.get("DIAGNOSE_PROGRESS_AFTER", delay))
    return DelayedStatus(label, delay, enabled=sys.stderr.isatty() and os.environ.get("DIAGNOSE_PROGRESS") != "0")


def stdin_as_file(paths: Sequence[str]) -> Any:
    """`-` among the paths: standard input, copied to a private temp file (it may be a pipe,
    which the scanner never opens) and removed afterwards."""
    from diagnose.evidence.stdin import stdin_paths

    return stdin_paths(paths, sys.stdin.buffer)


@main.command("run")
@click.argument("targets", nargs=-1, metavar="RUN_ID|BUNDLE...")
@report_options
@rule_options
@search_dir_option
@node_options
@host_options
@dev_options
@guarded
@click.pass_context
def run_command(ctx: click.Context, targets: tuple[str, ...], formats: tuple[str, ...], fail_on: str, since: str | None,
                until: str | None, output: Path | None, verbose: bool, quiet: bool, color: str,
                sarif_category: str | None, rule_dirs: tuple[Path, ...], config_path: Path | None,
                search_dirs: tuple[Path, ...], stall_after: str | None, hosts: str | None, hostfile: Path | None,
                slurm_job: str | None, host: str | None, exec_prefix: str | None, engine: str) -> None:
    """Diagnose RUN_ID (a run on this machine, behind --host, on --hosts, or a Slurm job's) or
    BUNDLE... (saved bundles; several are the nodes of one run, merged). `diagnose RUN_ID` is the
    short form."""
    from diagnose.evidence.bundle import evidence_from_bundles
    from diagnose.evidence.inputs import is_bundle
    from diagnose.live.runs import path_exists

    chosen = parse_formats(formats, output)
    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    paths = [Path(t) for t in targets]
    local = host is None and exec_prefix is None
    for target, path in zip(targets, paths, strict=True):
        if local and not path_exists(path) and looks_like_bundle_path(target):
            # ./nope.tar.gz, runs/flex7/: a path the user meant, not a run id to look for
            from diagnose.live.runs import RUN_ID

            also = "" if RUN_ID.match(target) else "; and not a run id (letters, digits and . _ - @ + = : only)"
            raise DiagnoseError(f"{target}: no such bundle (a folder or .tar.gz written by `diagnose collect`){also}")
    bundles = [p for p in paths if path_exists(p) and is_bundle(p)] if local else []
    nodes = chosen_hosts(hosts, hostfile, config_path, exec_prefix)
    if host is not None and (nodes is not None or slurm_job is not None):
        raise DiagnoseError("--host names one machine; --hosts/--hostfile/--slurm-job name several: give one or the other")
    if bundles and len(bundles) != len(paths):
        other = next(t for t, p in zip(targets, paths, strict=True) if p not in bundles)
        raise DiagnoseError(f"{other}: not a bundle; give one RUN_ID, or only bundles (the nodes of one run)")
    if len(paths) > 1 and not bundles:
        raise DiagnoseError(f"give one RUN_ID (got {len(paths)}); several arguments must all be bundles")
    if not targets and slurm_job is None:
        from diagnose.live.slurm import job_from_env

        slurm_job = job_from_env()
        if slurm_job is None:
            raise click.UsageError("give a RUN_ID or BUNDLE (or --slurm-job JOBID)")
    if bundles:
        if nodes is not None or slurm_job is not None:
            raise DiagnoseError("--hosts/--hostfile/--slurm-job collect live; bundles were collected already")
        evidence = evidence_from_bundles(bundles)  # first: a bad bundle is refused without waiting on the rules
        ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    elif slurm_job is not None or nodes is not None:
        from diagnose.app import evidence_for_nodes, evidence_for_slurm
        from diagnose.live.config import load_config
        from diagnose.live.runs import check_run_id

        if slurm_job is not None and nodes is not None:
            raise DiagnoseError("--slurm-job takes the job's own nodes; leave out --hosts/--hostfile")
        config = load_config(config_path)
        run_id = targets[0] if targets else None
        if run_id is not None:
            check_run_id(run_id)
        age = optional_age(stall_after, "stall-after")
        # An ssh node's logs are searched there with the rules' patterns: the rules first.
        ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        patterns = node_patterns(ruleset, nodes, slurm_job)
        if slurm_job is not None:
            from diagnose.live.slurm import check_job_id

            evidence = evidence_for_slurm(check_job_id(slurm_job), run_id, config, list(search_dirs), age,
                                          log_patterns=patterns)
        else:
            assert nodes is not None and run_id is not None
            evidence = evidence_for_nodes(run_id, nodes, config, list(search_dirs), age, log_patterns=patterns)
    else:
        target = targets[0]
        from diagnose.app import start_run
        from diagnose.live.config import load_config
        from diagnose.live.runs import check_run_id

        config = load_config(config_path)
        check_run_id(target)
        terminal = any(name == "terminal" and to is None for name, to in chosen)
        progress = terminal and sys.stderr.isatty()
        age = optional_age(stall_after, "stall-after")
        if host is not None or config.host:
            from diagnose.app import log_patterns, open_host

            # A remote run's logs are searched there with the rules' patterns: the rules first.
            ruleset = load_ruleset(rule_dirs, config.rule_dirs)
            remote = open_host(config, host, exec_prefix)
            check_dirs_on(remote, search_dirs)
            pending = start_run(target, config, list(search_dirs), progress=progress, stall_after=age, host=remote,
                                log_patterns=log_patterns(ruleset), engine=engine)
        else:
            if exec_prefix is not None:
                raise DiagnoseError("--exec needs --host (or target in the [host] table of the config)")
            # --dir names this machine's folders here; with --host (or [host] in the config) the far
            # side's, checked there; with --hosts / a Slurm job's nodes, the nodes'.
            check_dirs(search_dirs)
            # Collect in the background while the rules load: the two take about as long.
            pending = start_run(target, config, list(search_dirs), progress=progress, stall_after=age)
            ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        evidence = pending.evidence()
    diagnosis = timed_diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t,
                               stall_after=optional_age(stall_after, "stall-after"), timeline=wants_timeline(chosen))
    ctx.exit(emit(diagnosis, chosen, fail_on, verbose, ruleset, color=resolve_color(color), quiet=quiet,
                  category=sarif_category))


def node_output(out: Path) -> Path:
    """-o OUT/{host}: the node's own name in the path (srun fan-out: one bundle per node)."""
    if "{host}" not in str(out):
        return out
    import socket

    from diagnose.live.fanout import dir_name

    name = dir_name(os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    return Path(str(out).replace("{host}", name))


@main.command("collect")
@click.argument("run_id", required=False)
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True,
              help="Bundle to write: a new directory, or a file ending in .tar.gz ({host} is this node's name).")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Config file (default: the nearest diagnose.toml or pyproject.toml [tool.diagnose], else the user config).")
@search_dir_option
@node_options
@host_options
@click.option("-v", "--verbose", is_flag=True, help="Show gap reasons in full.")
@click.option("--raw", is_flag=True,
              help="Keep secrets (tokens, passwords, keys) in the copies and the manifest; by default they are masked.")
# The srun fan-out starts `diagnose collect --node --log FILE` on every node of a job.
@click.option("--node", "as_node", is_flag=True, hidden=True)
@click.option("--log", "logs", multiple=True, hidden=True)
@guarded
def collect_command(run_id: str | None, out: Path, config_path: Path | None, search_dirs: tuple[Path, ...],
                    stall_after: str | None, hosts: str | None, hostfile: Path | None, slurm_job: str | None, host: str | None,
                    exec_prefix: str | None, verbose: bool, raw: bool, as_node: bool, logs: tuple[str, ...]) -> None:
    """Save everything about RUN_ID as a bundle (logs, kernel log, tmux, GPUs, packages, ...);
    `diagnose BUNDLE` on any machine then gives the same causes. Secrets found in the copies
    and the manifest are masked (within lines, so line numbers stay) unless --raw. With --hosts
    or --slurm-job: one bundle with every node's part under hosts/<node>/."""
    from diagnose.app import collect_bundle, collect_nodes_bundle
    from diagnose.evidence.safetext import visible
    from diagnose.live.config import load_config
    from diagnose.live.runs import check_run_id

    config = load_config(config_path)
    if raw:
        click.echo("diagnose: warning: --raw: the bundle keeps secrets (tokens, passwords, keys) as they were; "
                   "do not share it", err=True)
    nodes = chosen_hosts(hosts, hostfile, config_path, exec_prefix)
    if run_id is None and slurm_job is None:
        raise click.UsageError("give a RUN_ID (or --slurm-job JOBID)")
    if run_id is not None:
        check_run_id(run_id)
    age = optional_age(stall_after, "stall-after")
    if nodes is not None or slurm_job is not None:
        from diagnose.live.slurm import check_job_id

        if host is not None:
            raise DiagnoseError("--host names one machine; --hosts/--hostfile/--slurm-job name several: give one or the other")
        if slurm_job is not None and nodes is not None:
            raise DiagnoseError("--slurm-job takes the job's own nodes; leave out --hosts/--hostfile")
        # What an ssh node's part of the bundle keeps: the lines these rules may match (and head and tail).
        patterns = node_patterns(load_ruleset((), config.rule_dirs), nodes, slurm_job)
        written, _top, results = collect_nodes_bundle(run_id, nodes, check_job_id(slurm_job) if slurm_job else None, config,
                                                     list(search_dirs), out, raw=raw, stall_after=age,
                                                     log_patterns=patterns)
        for result in results:
            offset = f"clock {result.clock.offset:+.3f} s" if result.clock else "clock not measured"
            reason = f"  {visible(result.reason)}" if result.reason else ""
            click.echo(f"  {result.name:<20} {result.status:<8} {result.seconds:6.2f} s  {offset}{reason}", err=True)
        click.echo(f"diagnose: wrote {written} ({len(results)} node(s)); diagnose it with: diagnose {written}", err=True)
        return
    assert run_id is not None
    out = node_output(out)
    remote = ruleset = None
    if host is not None or config.host:
        from diagnose.app import open_host

        # The logs stay where they are: the bundle keeps the lines these rules may match (and
        # the head and tail); `diagnose BUNDLE` with other rules says so.
        ruleset = load_ruleset((), config.rule_dirs)
        remote = open_host(config, host, exec_prefix)
        check_dirs_on(remote, search_dirs)
    elif exec_prefix is not None:
        raise DiagnoseError("--exec needs --host (or target in the [host] table of the config)")
    else:
        check_dirs(search_dirs)
    written, manifest = collect_bundle(run_id, config, list(search_dirs), out, progress=sys.stderr.isatty() and not as_node,
                                       raw=raw, stall_after=age, host=remote, rules=ruleset, logs=logs, node=as_node)
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
                 until: str | None, output: Path | None, verbose: bool, quiet: bool, color: str,
                 sarif_category: str | None, rule_dirs: tuple[Path, ...], config_path: Path | None, engine: str) -> None:
    """Scan captured files and folders (`-` reads standard input): training logs, kernel logs
    (dmesg), nvidia-smi output, package lists (pip freeze / pip list / conda list / collect_env /
    requirements.txt), torchelastic error files, HF Trainer trainer_state.json, Lightning
    metrics.csv, wandb files, NCCL flight-recorder dumps, sacct output, Kubernetes pod JSON,
    bundles. Kinds are detected; KIND:PATH forces one (see docs/ci.md). .gz/.bz2/.xz are read
    directly. Folder scans note every file they skip and why (-v lists them). `-` reads standard
    input (`ssh host cat train.log | diagnose scan -`)."""
    from diagnose.evidence.inputs import evidence_from_paths

    chosen = parse_formats(formats, output)
    since_t, until_t = parse_time(since, "since"), parse_time(until, "until")
    ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    with stdin_as_file(paths) as (args, names):
        evidence = evidence_from_paths(args, names)
        diagnosis = timed_diagnose(evidence, ruleset, engine=engine, since=since_t, until=until_t,
                                   timeline=wants_timeline(chosen))
    ctx.exit(emit(diagnosis, chosen, fail_on, verbose, ruleset, color=resolve_color(color), quiet=quiet,
                  category=sarif_category))


@main.group("rules")
def rules_group() -> None:
    """List, show, test, lint and scaffold rules. `test` and `lint` take rule files or folders the
    same way (PATH... or --rules DIR) and fixtures with --fixtures DIR."""


@rules_group.command("list")
@click.option("--category", help="Only this category.")
@rule_options
@guarded
def rules_list(category: str | None, rule_dirs: tuple[Path, ...], config_path: Path | None) -> None:
    """List rules: id, category, severity, title; and the causes the engine makes itself (engine)."""
    from diagnose.ruletools.tools import list_rows

    ruleset = load_ruleset(rule_dirs, config_rule_dirs(config_path))
    rows = list_rows(ruleset.rules, category)
    width = max((len(row[0]) for row in rows), default=10)
    for rule_id, rule_category, severity, title, origin in rows:
        click.echo(f"{rule_id:<{width}}  {rule_category:<12} {severity:<8}  {title}{f'  ({origin})' if origin else ''}")
    engine = sum(1 for row in rows if row[4] == "engine")
    click.echo(f"{len(rows) - engine} rule(s)" + (f", {engine} cause(s) made by the engine" if engine else ""), err=True)


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
    """Show every field of the rule RULE_ID, and the file it comes from (or the engine's own cause RULE_ID)."""
    from diagnose.ruletools.tools import find_rule, show

    click.echo(show(find_rule(load_ruleset(rule_dirs, config_rule_dirs(config_path)).rules, rule_id)))


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


@rules_group.command("docs")
@click.argument("directory", type=click.Path(path_type=Path))
@rule_options
@click.option("--builtin-only", is_flag=True, help="Only the built-in rules (as docs/rules/ of the project holds them).")
@guarded
def rules_docs(directory: Path, rule_dirs: tuple[Path, ...], config_path: Path | None, builtin_only: bool) -> None:
    """Write one Markdown page per rule (what it means, the fix, the real lines its tests match,
    references) and an index (README.md) into DIRECTORY. SARIF's helpUri points at these pages."""
    from diagnose.ruletools.docs import write_rule_docs

    rules = load_ruleset(rule_dirs, config_rule_dirs(config_path)).rules
    if builtin_only:
        rules = [r for r in rules if r.builtin]
    try:
        written = write_rule_docs(rules, directory)
    except OSError as exc:
        raise DiagnoseError(f"{directory}: cannot write the rule pages ({exc.strerror or exc})") from None
    click.echo(f"diagnose: wrote {len(written)} page(s) into {directory}", err=True)


@rules_group.command("schema")
@guarded
def rules_schema() -> None:
    """Print the JSON Schema of a rule file (the one shipped as diagnose/schema/rule.schema.json)."""
    import json

    from diagnose.ruletools.schema import rule_schema

    click.echo(json.dumps(rule_schema(), indent=2))


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


def parse_seconds(value: str, name: str, allow_zero: bool = False) -> float:
    """0.5s / 20s / 10m / 20 -> seconds (0 only where allow_zero)."""
    import re

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
    if not match or (float(match.group(1)) <= 0 and not allow_zero):
        raise DiagnoseError(f"--{name} {value!r}: expected a duration like 20s, 0.5s or 10m")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def say(text: str) -> None:
    """One line of launch/watch progress on stdout, control characters made visible."""
    from diagnose.evidence.safetext import visible

    click.echo(visible(text))
    sys.stdout.flush()


class CommandAfterOptions(click.Command):
    """RUN_ID [OPTIONS] [--] CMD...: options may come before and after RUN_ID; the first word
    after them (or everything after `--`) starts CMD, whose own options stay its own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {name for param in self.params if isinstance(param, click.Option) and not param.is_flag
                       for name in (*param.opts, *param.secondary_opts)}
        ours, index, positional = [], 0, 0
        while index < len(args):
            word = args[index]
            if word == "--":
                index += 1
                break
            if word.startswith("-") and word != "-":
                ours.append(word)
                if word in takes_value and index + 1 < len(args):
                    ours.append(args[index + 1])
                    index += 1
            elif positional == 0:
                ours.append(word)
                positional = 1
            else:
                break
            index += 1
        rest = args[index:]
        return super().parse_args(ctx, [*ours, "--", *rest] if rest else ours)


@main.command("launch", cls=CommandAfterOptions)
@click.argument("run_id")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD...")
@click.option("--via", type=click.Choice(["tmux", "setsid", "systemd-run"]),
              help="How to detach it: a tmux session named after the run (default; setsid when tmux is missing), "
                   "setsid, or a transient systemd unit.")
@click.option("--log", "log", metavar="PATH", help="Where its output goes (default: RUN_ID.log in --cwd); never overwritten "
                                                   "unless --force.")
@click.option("--cwd", "cwd", metavar="DIR", help="The run's working directory (default: the current one).")
@click.option("--wait", "wait", default="20s", show_default=True, metavar="DURATION",
              help="How long to watch it before saying whether it started.")
@click.option("--force", is_flag=True, help="Empty an existing log instead of refusing.")
@click.option("-L", "--tmux-socket-name", "socket_name", metavar="NAME", help="tmux -L NAME: the server's socket name.")
@click.option("--keep-cgroup", is_flag=True,
              help="Leave the run in this session's cgroups (e.g. a Slurm step's, to keep its limits); by default "
                   "the supervisor leaves them, so that the end of an exec session does not take the run along.")
@rule_options
@guarded
@click.pass_context
def launch_command(ctx: click.Context, run_id: str, command: tuple[str, ...], via: str | None, log: str | None,
                   cwd: str | None, wait: str, force: bool, socket_name: str | None, keep_cgroup: bool,
                   rule_dirs: tuple[Path, ...], config_path: Path | None) -> None:
    """Start CMD as run RUN_ID, detached and supervised, and say within --wait seconds whether it
    really started: its pid and first lines, or why not (script not found, interpreter missing,
    tmux server gone, silent and sleeping, a traceback). The run survives the end of the ssh /
    exec session that started it; its exit status goes into a launch record that
    `diagnose RUN_ID`, `watch`, `collect` and `runs` read. Exit 0: it started; 1: it did not."""
    from diagnose.app import launch
    from diagnose.live.launch import LaunchRequest
    from diagnose.live.runs import check_run_id

    check_run_id(run_id)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise DiagnoseError("launch: no command given (diagnose launch RUN_ID -- CMD ...)")
    seconds = parse_seconds(wait, "wait", allow_zero=True)
    request = LaunchRequest(run_id, tuple(command), via, log, cwd, force, socket_name, keep_cgroup)
    result = launch(request, seconds, lambda: load_ruleset(rule_dirs, config_rule_dirs(config_path)), say)
    say(result.headline)
    for line in result.details:
        say(f"  {line}")
    ctx.exit(ExitCode.OK if result.started else ExitCode.FINDINGS)


@main.command("watch")
@click.argument("run_id", required=False)
@click.option("--every", default="10s", show_default=True, metavar="DURATION", help="How often to look (0.5s, 10s, 1m).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True,
              help="json: one JSON object per event per line, the diagnosis last.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
              help="Exit 1 when the diagnosis finds a cause at or above this severity.")
@click.option("-v", "--verbose", is_flag=True, help="Show skipped rules, all evidence, references in the diagnosis.")
@rule_options
@search_dir_option
@click.option("--hosts", "hosts", metavar="NODE,...",
              help="Follow the run on these nodes at once (as `diagnose RUN_ID --hosts`: ssh targets or aliases, "
                   "localhost, NAME=DIR).")
@click.option("--hostfile", type=click.Path(path_type=Path), help="File naming the nodes, one a line.")
@click.option("--exec", "exec_prefix", metavar="PREFIX", help="Put before every command on the ssh nodes.")
@click.option("--slurm-job", "slurm_job", metavar="JOBID",
              help="Follow this Slurm job (its state, its output file) until it ends, then diagnose it "
                   "(default inside an allocation with no RUN_ID: $SLURM_JOB_ID).")
@guarded
@click.pass_context
def watch_command(ctx: click.Context, run_id: str | None, every: str, fmt: str, fail_on: str, verbose: bool,
                  rule_dirs: tuple[Path, ...], config_path: Path | None, search_dirs: tuple[Path, ...],
                  stall_after: str | None, hosts: str | None, hostfile: Path | None, exec_prefix: str | None,
                  slurm_job: str | None) -> None:
    """Follow RUN_ID (started by `diagnose launch`, or found as `diagnose RUN_ID` finds it) and
    print one line per change: started, first output, first step, log silent, busy, process
    gone, exit status. When it ends or stalls (silent for --stall-after with little CPU), print
    the diagnosis and exit with its exit code."""
    import io
    import json

    from diagnose.app import diagnose, watch
    from diagnose.live.config import load_config

    config = load_config(config_path)
    # The follower decides as it goes, before the run has a cadence to read: the fixed default.
    seconds, stall = parse_seconds(every, "every"), parse_age(stall_after or "10m", "stall-after")

    def on_event(event: Any) -> None:
        if fmt == "json":
            click.echo(json.dumps(event.to_json()))
            sys.stdout.flush()
        else:
            say(event.line())

    nodes = chosen_hosts(hosts, hostfile, config_path, exec_prefix)
    if run_id is None and slurm_job is None:
        from diagnose.live.slurm import job_from_env

        slurm_job = job_from_env()
        if slurm_job is None:
            raise click.UsageError("give a RUN_ID (or --slurm-job JOBID)")
    if slurm_job is not None:
        from diagnose.app import watch_slurm
        from diagnose.live.slurm import check_job_id

        if nodes is not None:
            raise DiagnoseError("--slurm-job takes the job's own nodes; leave out --hosts/--hostfile")
        ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        evidence = watch_slurm(check_job_id(slurm_job), run_id, config, list(search_dirs), seconds, stall, on_event,
                               log_patterns=node_patterns(ruleset, None, slurm_job))
        run_id = evidence.run.id
    elif nodes is not None:
        from diagnose.app import watch_nodes

        assert run_id is not None

        ruleset = load_ruleset(rule_dirs, config.rule_dirs)
        evidence = watch_nodes(run_id, nodes, config, list(search_dirs), seconds, stall, on_event,
                               log_patterns=node_patterns(ruleset, nodes, None))
    else:
        if exec_prefix is not None:
            raise DiagnoseError("--exec is for the ssh nodes of --hosts/--hostfile")
        assert run_id is not None
        evidence = watch(run_id, config, list(search_dirs), seconds, stall, on_event)
        ruleset = load_ruleset(rule_dirs, config.rule_dirs)
    diagnosis = diagnose(evidence, ruleset, stall_after=stall)
    if fmt == "json":
        from diagnose.report.render import Format, render

        buffer = io.StringIO()
        render(Format.JSON, diagnosis, buffer, verbose, rules=ruleset.by_id(), fail_on=fail_on)
        code = exit_code(diagnosis, fail_on)
        import time

        click.echo(json.dumps({"event": "diagnosis", "run": run_id, "time": round(time.time(), 3),
                               "exit_code": int(code), "report": json.loads(buffer.getvalue())}))
        ctx.exit(code)
    click.echo()
    ctx.exit(emit(diagnosis, [("terminal", None)], fail_on, verbose, ruleset))


@main.command("runs")
@click.option("--all", "show_all", is_flag=True, help="Every record, not only the 20 newest.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True)
@guarded
def runs_command(show_all: bool, fmt: str) -> None:
    """The runs `diagnose launch` started (newest first) and their state: starting, running,
    exited N, killed by SIGNAL, did not start, gone (no exit recorded)."""
    import json
    import time

    from diagnose.app import recent_runs

    found = recent_runs(None if show_all else 20)
    if fmt == "json":
        for data, state in found:
            click.echo(json.dumps({"run": data.get("run_id"), "state": state.state, "status": state.text,
                                   "code": state.code, "signal": state.signal, "via": data.get("via"),
                                   "pid": data.get("pid"), "log": data.get("log"), "created_at": data.get("created_at"),
                                   "record": data.get("_path")}))
        return
    if not found:
        click.echo("diagnose: no launch records (diagnose launch RUN_ID -- CMD starts one)", err=True)
        return
    width = max(len(str(d.get("run_id"))) for d, _s in found)
    for data, state in found:
        when = data.get("created_at")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "?"
        say(f"{data.get('run_id')!s:<{width}}  {stamp}  {state.text:<28}  {data.get('via')!s:<7}  {data.get('log')}")
