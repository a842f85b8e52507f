"""A rule file must never hang the tool: catastrophic patterns, YAML alias bombs, huge files,
deep nesting and huge patterns are refused at load, fast, with file:line and exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from diagnose.errors import RuleError
from diagnose.patterns.hangcheck import (
    MAX_PATTERN_CHARS,
    MAX_PATTERNS_PER_RULE,
    static_problem,
    torture_problem,
)
from diagnose.rules.load import builtin_rules_dir, load_rules
from diagnose.rules.yamlnodes import MAX_BYTES, MAX_DEPTH
from tests.support.cli import run_cli

# Forms that backtrack catastrophically (exponentially, or polynomially of degree >= 3), from
# the ReDoS literature (OWASP "Regular expression Denial of Service", regexploit, recheck,
# redos-detector examples) and the shapes of our own safety review. Each is refused by the
# static check alone (the torture run and the empty-line check come on top).
CATASTROPHIC = [
    # a repeat over alternatives that can start alike
    r"ERROR (?:b|bb)+$",
    r"(a|a)*",
    r"x(a|a)*y",
    r"(a|ab)*c",
    r"(\w|\d)+$",
    r"^(a|a?)+$",
    r"(?:[ab]|a)+$",
    r"(\d+|\d+\.\d+)+$",
    r"(a|aa)+$",
    r"(?:a|b|ab)+c",
    r"(\w|_)+@",
    r"(?:\d|\d\d)+$",
    r"(?:x|[a-z])+$",
    r"(?i)(?:A|a)+$",
    # nested repeats whose inner repeat can run across the boundary between rounds
    r"(a+)+",
    r"^(a+)+$",
    r"(a*)*",
    r"x(a*)*y",
    r"([a-z]+)*$",
    r"(x+x+)+y",
    r"(.*a){10}",
    r"(.*?,){12}P",
    r"(.*){1,32000}[bc]",
    r"^(\w+\s?)+$",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"^([a-zA-Z0-9])(([\-.]|[_]+)?([a-zA-Z0-9]+))*(@){1}[a-z0-9]+[.]{1}(([a-z]{2,3})|([a-z]{2,3}[.]{1}[a-z]{2,3}))$",
    r"(\S+\s*)+$",
    r"(.+)+!",
    r"([0-9]+,?)+$",
    r"(a+|b+)*c",
    r"(a\w+b)+$",
    r"x(.*?)*y",
    r"Exception: (?:\w+\.?)+$",
    r"\[(\w+\s*)*\]",
    r"(?=(a+)+$)x",
    # a repeated group that can match empty text
    r"(\s*,?\s*)*$",
    r"x(\s*,?\s*)*$",
    r"(a?){25}a{25}",
    # long repeats in a row over a shared character, and something after that can fail
    r"\s+\s+\s+$",
    r"boom\s+\s+\s+$",
    r"(?P<a>\S+)(?P<b>\S+)y",
    r"x\d+\d*\d+y",
    r"x\S+\S+y",
]

# Everyday rule patterns, most from the pack (rules/**/*.yaml), some shapes users write.
SAFE = [
    r"CUDA out of memory\. Tried to allocate (?P<requested>\d[\d.]* [KMGTP]?i?B)\. GPU (?P<gpu>\d+) has a total capac",
    r"(?P<so>[^\s:'\"]+\.so(?:\.\d{1,6}){0,4}): undefined symbol: (?P<symbol>_ZNK?(?:3c10|2at|5torch|6caffe2)\w*)",
    r"CalledProcessError: Command .{0,200}(?:gcc|g\+\+|clang|cc|tcc\.exe)",
    r"NCCL [Ee]rror(?: in: \S+| \d+)?[:,] internal error(?: - please report this issue to the NCCL developers)?(?:, NCCL version (?P<nccl_version>[\w.+]+))?",
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)(?: GPU-I:\d+)?(?: GPU-CI:\d+)?\): (?P<xid>48|61|62|64|74|94|95|109|119),",
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=\d+, NumelOut=\d+)?, Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds",
    r"Work WorkNCCL\(SeqNum=\d+, OpType=\w+[^)]*\) timed out in blocking wait",
    r"what\(\):\s+.*(?:CUDA error|NCCL|Watchdog caught collective operation timeout|ProcessGroupNCCL)",
    r"\.cuh?:\d+: (?:[^\[\]]{1,200}?: )?block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `(?P<assertion>.+)` failed\.",
    r"(?P<python>\S*python[\d.]*): can't open file '(?P<script>[^']+)': \[Errno 2\] (?P<reason>No such file or directory)",
    r"ImportError: cannot import name '(?P<name>\w+)' from '(?P<module>[\w.]+)' \((?P<module_path>[^)]*[/\\](?:site|dist)-packages[/\\][^)]*)\)",
    r"Make sure to have access to it at https://huggingface\.co/(?P<repo_id>\S+?)\.?\s*$",
    r"Repository Not Found for url: (?P<url>https?://\S+?)\.?(?:\s|$)",
    r"srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,\-]+): (?P<how>Killed|Terminated)\s*$",
    r"The server socket has failed to (?:bind to|listen on) \S*?:(?P<port>\d+) \(errno: 98 - Address already in use\)",
    r"(?:Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): Kill(?:ed)? process",
    r"(?:^|[\s.])InductorError: (?P<inner>\S.*)",
    r"ImportError: No module named (?P<module>[\w.]+)\s*$",
    r"\bncclUnhandledCudaError\b",
    r"^\s*Killed\s*$",
    r"[Rr]eason\"?:\s*\"?OOMKilled\b",
    r"\[Errno 5\] Input/output error(?:: (?P<path>.+))?",
    r"Expected all tensors to be on the same device, but found at least two devices, (?P<device_a>[\w:]+) and (?P<device_b>[\w:]+)!",
    r"DataLoader worker \(pid (?P<pids>\d+)\) exited unexpectedly with exit code (?P<worker_exit_code>-?\d+)",
    r"threading\.py\", line \d+, in (?:run|_bootstrap_inner)",
    # shapes users write
    r"version (?P<v>(?:\d+\.)+\d+)$",
    r"(?:\.\d+)*x",
    r"(?:ab|cd)+$",
    r"File \"(?P<path>[^\"]+)\", line (?P<line>\d+), in (?P<func>\S+)",
    r"key=(?P<k>\S+) (?P<v>\S+)$",
    r"(?i)error: (?P<msg>.+)$",
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}",
]

GOOD_RULE = """\
id: demo.good
title: A good rule
category: demo
role: root
severity: error
confidence: 0.8
when:
  any:
    - log: 'PATTERN'
explanation: "It went boom."
fix: ["Do not go boom."]
"""
PATTERN_LINE = 9


def write_rule(folder: Path, pattern: str, name: str = "demo.good") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(GOOD_RULE.replace("demo.good", name).replace("PATTERN", pattern.replace("'", "''")), encoding="utf-8")
    return path


def problems_for(folder: Path) -> list[str]:
    with pytest.raises(RuleError) as info:
        load_rules([folder], builtin=False)
    return info.value.details


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_each_catastrophic_form_is_refused_at_load_with_file_and_line(tmp_path: Path, pattern: str) -> None:
    assert static_problem(pattern) is not None, "the static check alone must see it"
    path = write_rule(tmp_path, pattern)
    problems = problems_for(tmp_path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}:{PATTERN_LINE}: "), problems
    assert "backtrack" in problems[0] or "empty line" in problems[0], problems


@pytest.mark.parametrize("pattern", SAFE)
def test_everyday_patterns_are_accepted(tmp_path: Path, pattern: str) -> None:
    assert static_problem(pattern) is None
    assert torture_problem(pattern) is None
    write_rule(tmp_path, pattern)
    assert [r.id for r in load_rules([tmp_path], builtin=False).rules] == ["demo.good"]


def test_the_whole_pack_passes_every_guard_as_user_rules_do() -> None:
    # Built-in rules skip the hang checks at load (for speed); held to them here, as a user
    # folder is, every pattern of every rule must pass.
    ruleset = load_rules([builtin_rules_dir()], builtin=False)
    assert len(ruleset.rules) >= 100


def test_a_form_the_static_check_cannot_read_is_left_to_the_torture_run(tmp_path: Path) -> None:
    # \p{L} is `regex`-only syntax: sre cannot parse it, so only the torture run can refuse it.
    pattern = r"x|(?:\p{L}|\p{L})*b"
    assert static_problem(pattern) is None
    write_rule(tmp_path, pattern)
    assert any("16 KiB" in p for p in problems_for(tmp_path))


# ---------------------------------------------------------------- YAML and size bombs

LAUGHS = """\
id: demo.laughs
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def timed_cli(args: list[str], timeout: float) -> tuple[float, int, str]:
    started = time.perf_counter()
    result = run_cli(args, timeout=timeout)
    return time.perf_counter() - started, result.returncode, result.stderr


def startup(tmp_path: Path, log: Path) -> float:
    """What the CLI takes with one harmless user rule: the refusals are measured against it."""
    good = tmp_path / "good"
    good.mkdir()
    write_rule(good, "boom")
    seconds, code, _ = timed_cli(["scan", str(log), "--rules", str(good)], timeout=60)
    assert code == 0
    return seconds


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "train.log"
    path.write_text("step 1 loss 2.0\n")
    return path


def test_billion_laughs_is_refused_fast_with_file_and_line(tmp_path: Path, log: Path) -> None:
    bomb = tmp_path / "bomb"
    bomb.mkdir()
    (bomb / "demo.laughs.yaml").write_text(LAUGHS)
    assert len(LAUGHS) < 800
    base = startup(tmp_path, log)
    # Without the refusal this file takes about a minute; the subprocess timeout keeps a
    # regression from hanging the suite.
    seconds, code, stderr = timed_cli(["scan", str(log), "--rules", str(bomb)], timeout=30)
    assert code == 2
    assert f"{bomb / 'demo.laughs.yaml'}:2: YAML anchors and aliases are not allowed in rule files" in stderr
    assert "Traceback" not in stderr
    assert seconds < base + 2.0, (seconds, base)


def test_anchor_alone_and_alias_in_a_rule_are_refused_at_their_line(tmp_path: Path) -> None:
    path = write_rule(tmp_path, "boom")
    path.write_text(path.read_text().replace("fix: [", "fix: &fixes [") + "references: *fixes\n")
    problems = problems_for(tmp_path)
    assert problems == [f"{path}:11: YAML anchors and aliases are not allowed in rule files"]


def test_deep_nesting_and_huge_files_are_refused(tmp_path: Path) -> None:
    deep = tmp_path / "demo.deep.yaml"
    deep.write_text("id: demo.deep\nx: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n")
    huge = tmp_path / "demo.huge.yaml"
    huge.write_text("id: demo.huge\n" + "# padding\n" * (MAX_BYTES // 10 + 1))
    problems = sorted(problems_for(tmp_path))
    assert problems[0].startswith(f"{deep}:2: nested deeper than {MAX_DEPTH} levels"), problems
    assert problems[1].startswith(f"{huge}:1: rule file is over"), problems


def test_huge_alternation_is_refused_fast(tmp_path: Path, log: Path) -> None:
    # ~900 KB of alternatives (under the file limit): compiling it would take minutes.
    words = "|".join(f"word{n:06d}" for n in range(80_000))
    big = tmp_path / "big"
    big.mkdir()
    path = write_rule(big, f"ERROR (?:{words})")
    assert path.stat().st_size < MAX_BYTES
    base = startup(tmp_path, log)
    seconds, code, stderr = timed_cli(["scan", str(log), "--rules", str(big)], timeout=60)
    assert code == 2 and "Traceback" not in stderr
    assert f"{path}:{PATTERN_LINE}: regex 'ERROR (?:word000000|" in stderr
    assert f"the limit is {MAX_PATTERN_CHARS:,}" in stderr
    assert seconds < base + 2.0, (seconds, base)


def test_pattern_length_and_count_limits(tmp_path: Path) -> None:
    path = write_rule(tmp_path, "x" * (MAX_PATTERN_CHARS + 1))
    problems = problems_for(tmp_path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}:{PATTERN_LINE}: regex 'xxx")
    many = "\n".join(f"    - log: 'boom {n}'" for n in range(MAX_PATTERNS_PER_RULE + 1))
    path.write_text(GOOD_RULE.replace("    - log: 'PATTERN'", many))
    problems = problems_for(tmp_path)
    assert problems == [f"{path}:{PATTERN_LINE + MAX_PATTERNS_PER_RULE}: a rule may have at most "
                        f"{MAX_PATTERNS_PER_RULE} log/dmesg patterns"]


def test_a_malformed_rule_is_exit_2_with_file_and_line_in_one_line(tmp_path: Path, log: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    path = write_rule(bad, "(a|ab)*c")
    result = run_cli(["scan", str(log), "--rules", str(bad), "--format", "json"], timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if f"{path}:{PATTERN_LINE}:" in line]
    assert len(lines) == 1 and "catastrophic backtracking" in lines[0], result.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout or "x")  # no report on a rule-load error
