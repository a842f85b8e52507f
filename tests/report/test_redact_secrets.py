"""Secrets never leave in a report: planted into a copy of a real log, they are masked in every
format; real logs' look-alikes (WANDB_API_KEY set=True, hf_hub_download, placeholders) are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.app import diagnose
from diagnose.evidence.inputs import evidence_from_paths
from diagnose.evidence.redact import MASK, Masker, redact
from diagnose.report.redact import redact_diagnosis
from diagnose.report.render import Format, reporter
from tests.support.paths import DATA
from tests.support.report import CI, FORMATS, TEST_RULES, invoke, load_rules_cached, working_dir
from tests.support.secrets import CORPUS, Planted

# Test inputs for masking, constructed here (not log evidence): (line appended to the log, the secret in it).
PLANTED = [
    ("export WANDB_API_KEY=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"),
    ("wandb login 4b227777d4dd1fc61c6f884f48641d02b4d121d3", "4b227777d4dd1fc61c6f884f48641d02b4d121d3"),
    ("export HF_TOKEN=hf_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890", "QwErTyUiOpAsDfGhJkLzXcVbNm1234567890"),
    ("token hf_ZxCvBnMaSdFgHjKlQwErTyUiOp0987654321 from the cache", "ZxCvBnMaSdFgHjKlQwErTyUiOp0987654321"),
    ("AWS_ACCESS_KEY_ID=AKIAQ3EXAMPLEZ7K4T2B", "Q3EXAMPLEZ7K4T2B"),
    ("aws_secret_access_key = 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", "tV9Lq2mXw8Rf4Bz0Kc7Yp1Hs5Nd3Gj6Ae9UiOo2E"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXBhcnQtMTIz",
     "c2lnbmF0dXJlLXBhcnQtMTIz"),
    ("authorization: token 7c4a8d09ca3762af61e59520943dc26494f8941b", "7c4a8d09ca3762af61e59520943dc26494f8941b"),
    ("DB_PASSWORD=Zq8#mK2!vL9pW4xR", "Zq8#mK2!vL9pW4xR"),
    ("MLFLOW_TRACKING_TOKEN=mlf_8c1d2e3f4a5b6c7d8e9f", "mlf_8c1d2e3f4a5b6c7d8e9f"),
    ("S3_SECRET=Ue7dK2pQ9wLm4Xz8", "Ue7dK2pQ9wLm4Xz8"),
    ("GITHUB_TOKEN=ghp_R4nd0mT0k3nV4lu3F0rT3st1ng0123456789", "R4nd0mT0k3nV4lu3F0rT3st1ng0123456789"),
    ("token github_pat_11AAAAAAA0123456789_abcdefghijABCDEFGHIJ0123456789xyz", "11AAAAAAA0123456789_abcdefghijABCDEFGHIJ0123456789xyz"),
    ("OPENAI_API_KEY=sk-proj-7Hq2Lx9Vw3Mz8Kp4Rt6Yb1Nc5Df0Gs2Aj", "7Hq2Lx9Vw3Mz8Kp4Rt6Yb1Nc5Df0Gs2Aj"),
    ("token sk-8fJ2kL9mN3pQ7rS1tU5vW0xY4zA6bC2d", "8fJ2kL9mN3pQ7rS1tU5vW0xY4zA6bC2d"),
]


@pytest.mark.parametrize(("line", "secret"), PLANTED, ids=[line.split("=")[0].split(" ")[0] + str(n) for n, (line, _) in enumerate(PLANTED)])
def test_each_kind_is_masked(line: str, secret: str) -> None:
    masked = redact(line)
    assert secret not in masked and MASK in masked
    assert redact(masked) == masked  # idempotent


def test_the_kind_of_token_stays_visible() -> None:
    assert redact("token hf_ZxCvBnMaSdFgHjKlQwErTyUiOp0987654321 x") == "token hf_*** x"
    assert redact("key AKIAQ3EXAMPLEZ7K4T2B used") == "key AKIA*** used"
    assert redact("export WANDB_API_KEY=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b") == "export WANDB_API_KEY=***"
    assert redact("Authorization: Bearer abcdefghijklmnop1234") == "Authorization: Bearer ***"


REAL_LOOKALIKES = [
    (CI / "wandb-fakekey" / "train.log", "WANDB_API_KEY set=True"),
    (CI / "wandb-nokey-old" / "train.log", "call wandb.login(key=[your_api_key])"),
    (CI / "wandb-debug" / "debug.log", "'api_key': '***REDACTED***'"),
    (CI / "hf-offline" / "train.log", "hf_hub_download("),
    (CI / "wandb-fakekey" / "train.log", 'Post "https://api.forge.coreweave.com/graphql": dial tcp: lookup'),
]


@pytest.mark.parametrize(("path", "needle"), REAL_LOOKALIKES, ids=[n for _, n in REAL_LOOKALIKES])
def test_real_lines_that_only_look_like_secrets_stay(path: Path, needle: str) -> None:
    lines = [line for line in path.read_text(errors="replace").splitlines() if needle in line]
    assert lines, f"{needle!r} not in {path}"
    for line in lines:
        assert redact(line) == line


def test_no_real_log_line_is_touched() -> None:
    """Every line of the real logs here carries no secret; masking must leave all of them alone."""
    logs = [p for folder in (CI, DATA / "logs") for p in folder.rglob("*") if p.is_file() and p.suffix in (".log", ".txt")]
    assert len(logs) >= 9
    changed = [(p.name, line) for p in logs for line in p.read_text(errors="replace").splitlines() if redact(line) != line]
    assert changed == []


@pytest.fixture
def leaky_log(tmp_path: Path) -> Path:
    """A copy of a real healthy log with the planted lines appended (test input, not evidence)."""
    log = tmp_path / "train.log"
    log.write_text((CI / "healthy" / "train.log").read_text() + "\n".join(line for line, _ in PLANTED) + "\n")
    return log


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_secret_in_any_format(fmt: str, leaky_log: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = invoke(["scan", str(leaky_log), "--rules", str(TEST_RULES), "--format", fmt, "-v"],
                    env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 1, result.output
    outputs = [result.stdout, result.stderr] + ([summary.read_text()] if summary.exists() else [])
    for text in outputs:
        for _, secret in PLANTED:
            assert secret not in text, (fmt, secret)
    assert "WANDB_API_KEY=***" in result.stdout.replace("\\_", "_")
    assert "testsecrets.echoed-credentials" in result.stdout


def test_captures_quoted_alone_are_masked_too(leaky_log: Path) -> None:
    # The test rule puts the captured value alone in its title and fix ("Rotate {value} now."):
    # no NAME= context there, yet the value is masked because it was found as a secret elsewhere.
    data = json.loads(invoke(["scan", str(leaky_log), "--rules", str(TEST_RULES), "--format", "json"]).stdout)
    (cause,) = [c for c in data["causes"] if c["id"] == "testsecrets.echoed-credentials"]
    assert cause["title"] == "A credential was echoed into the log: ***"
    assert cause["fix"][0] == "Rotate *** now."
    evidence = [e["text"] for e in cause["evidence"]]
    assert "export WANDB_API_KEY=***" in evidence and "wandb login ***" in evidence


def test_masking_copies_and_leaves_paths_alone(leaky_log: Path) -> None:
    with working_dir(leaky_log.parent):
        diagnosis = diagnose(evidence_from_paths([leaky_log.name]), load_rules_cached(TEST_RULES))
    masked = redact_diagnosis(diagnosis)
    original = [e.text for c in diagnosis.causes for e in c.evidence]
    assert any(PLANTED[0][1] in text for text in original), "the original diagnosis must stay as it was"
    assert not any(PLANTED[0][1] in e.text for c in masked.causes for e in c.evidence)
    assert masked.evidence.texts[0].path == diagnosis.evidence.texts[0].path
    assert masked.evidence.texts[0].kind is diagnosis.evidence.texts[0].kind
    assert [c.severity for c in masked.causes] == [c.severity for c in diagnosis.causes]


@pytest.mark.parametrize("fmt", list(Format), ids=lambda f: f.value)
def test_reporters_mask_even_when_called_directly(fmt: Format, leaky_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    ruleset = load_rules_cached(TEST_RULES)
    with working_dir(leaky_log.parent):
        diagnosis = diagnose(evidence_from_paths([leaky_log.name]), ruleset)
        out = io.StringIO()
        reporter(fmt)(diagnosis, out, True, rules=ruleset.by_id())
    assert "testsecrets.echoed-credentials" in out.getvalue()
    for _, secret in PLANTED:
        assert secret not in out.getvalue(), (fmt, secret)


# --- The corpus of real-format secrets (tests/secret_corpus.py) -------------------------------

EVIDENCE_RULES = CI / "rules-evidence"  # test rule: every line of a log is evidence


def corpus_log(planted: Planted, folder: Path) -> Path:
    """The planted lines, then a crash whose message quotes the last of them (so the secret is in
    the crash evidence, the cause's title and the unrecognised-crash fallback too)."""
    log = folder / f"{planted.id}.log"
    log.write_text("\n".join([*planted.lines, "Traceback (most recent call last):",
                              '  File "/home/u/flex/train.py", line 42, in <module>', "    main()",
                              f"RuntimeError: {planted.lines[-1].strip()}"]) + "\n")
    return log


def test_the_corpus_covers_the_formats_of_the_issue() -> None:
    assert len(CORPUS) >= 20 and len({p.id for p in CORPUS}) == len(CORPUS)
    for planted in CORPUS:
        assert 1 <= len(planted.lines) <= 6, planted.id  # a rule shows at most 6 evidence lines
        text = "\n".join(planted.lines)
        assert all(secret in text for secret in planted.secrets), planted.id


@pytest.mark.parametrize("planted", CORPUS, ids=[p.id for p in CORPUS])
def test_each_corpus_secret_is_masked_and_the_rest_stays(planted: Planted) -> None:
    masker = Masker()
    lines = [masker(line) for line in planted.lines]
    text = "\n".join(lines)
    assert [s for s in planted.secrets if s in text] == []
    assert MASK in text and planted.kept in text
    assert redact("\n".join(planted.lines)) == text  # as one text or line by line: the same
    assert all(redact(line) == line for line in lines if "PRIVATE KEY" not in line)  # idempotent


@pytest.mark.parametrize("planted", CORPUS, ids=[p.id for p in CORPUS])
def test_each_corpus_secret_reaches_the_report_unmasked(planted: Planted, tmp_path: Path) -> None:
    """What makes the per-format test able to fail: without masking, every secret of the corpus
    is in the evidence handed to the reporters; with the built-in rules alone, those of the last
    line are in the unrecognised crash's evidence and title."""
    log = corpus_log(planted, tmp_path)
    with working_dir(tmp_path):
        every_line = diagnose(evidence_from_paths([log.name]), load_rules_cached(EVIDENCE_RULES))
        crash_only = diagnose(evidence_from_paths([log.name]), load_rules_cached())
    shown = [e.text for c in every_line.causes for e in c.evidence]
    for secret in planted.secrets:
        assert any(secret in text for text in shown), (planted.id, secret)
    (crash,) = [c for c in crash_only.causes if c.id == "unrecognised.crash"]
    crash_texts = [e.text for e in crash.evidence]
    for secret in planted.secrets:
        if secret in planted.lines[-1]:
            assert any(secret in text for text in crash_texts), (planted.id, secret)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_corpus_secret_in_any_format(fmt: str, tmp_path: Path) -> None:
    """For every corpus entry, through the CLI, with the test rule that shows every line and with
    the built-in rules alone (the crash fallback): the leak count of the format is 0."""
    leaks: list[str] = []
    for planted in CORPUS:
        for rules in (["--rules", str(EVIDENCE_RULES)], []):
            folder = tmp_path / f"{planted.id}{len(rules)}"
            folder.mkdir()
            log = corpus_log(planted, folder)
            summary = folder / "summary.md"
            result = invoke(["scan", str(log), *rules, "-v", "--format", fmt], env={"GITHUB_STEP_SUMMARY": str(summary)})
            assert result.exit_code == 1, (planted.id, result.output)
            assert ("every-line" if rules else "unrecognised.crash") in result.stdout.replace("\\", ""), planted.id
            text = result.stdout + result.stderr + (summary.read_text() if summary.exists() else "")
            leaks += [f"{planted.id}: {s}" for s in planted.secrets if s in text]
    assert leaks == []


ADVERSARIAL = {  # 200 KB lines that make a careless pattern backtrack
    "login(": "login(", "A_": "A_", "A_KEY": "A_KEY", "key=": "key=", "key=a1": "key=a1", "https://u:": "https://u:",
    "a://a": "a://a", "password ": "password ", "--token ": "--token ", "machine x ": "machine x ",
    "BEGIN": "-----BEGIN RSA PRIVATE KEY-----", "pem words": "ab1Z ", "AKIA": "AKIAQ3EXAMPLEZ7K4T2B kV7nQz2aaaaaaaaaaaaaaaaaaaaaaaaaaaaa+Tq9 ",
    "base64": "A+/a1", "secret ": "secret ", "?sig=": "?sig=", "bearer ": "bearer ", "authorization: ": "authorization: ",
    "wandb login": "wandb login ", "12345678:AA": "12345678:AA", "spaces": " ",
}


def test_masking_a_200kb_line_stays_linear() -> None:
    # In a subprocess, each line under its own alarm (design: no timed asserts, only timeouts):
    # a quadratic pattern takes minutes on one of these lines (login( took 82 s before its repeat
    # was bounded, key=a1... 6 s before its value became possessive); linear, each takes ~0.1 s.
    code = (
        "import signal, sys, json\nfrom diagnose.evidence.redact import Masker, redact\n"
        "def late(*_): sys.exit('too slow: ' + unit)\n"
        "signal.signal(signal.SIGALRM, late)\n"
        "for unit in json.loads(sys.argv[1]):\n"
        "    line = (unit * (200_000 // len(unit) + 1))[:200_000]\n"
        "    signal.alarm(PER_LINE_S)\n"
        "    redact(line); Masker()(line); redact('-----BEGIN PRIVATE KEY-----\\n' + line)\n"
        "    signal.alarm(0)\n"
        "print('ok')\n"
    ).replace("PER_LINE_S", "4")
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code, json.dumps(list(ADVERSARIAL.values()))], capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "ok", result.stderr


def test_elided_examples_and_escaped_lines() -> None:
    # A rule's fix shows the shape of a setting (HF_TOKEN=hf_...): not a secret, stays.
    fix = "Give the job a token: HF_TOKEN=hf_... in its environment"
    assert redact(fix) == fix
    # In a repr or JSON string a literal \n glues the next line's name to an "n": still masked,
    # and the value stops at the backslash, so what follows stays readable.
    line = r'cmd: "export A=1\nWANDB_API_KEY=' + CORPUS[0].secrets[0] + r'\nhf_aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567\tok"'
    assert redact(line) == r'cmd: "export A=1\nWANDB_API_KEY=***\nhf_***\tok"'


def test_masked_file_copies_keep_every_byte_and_line_but_the_secrets(tmp_path: Path) -> None:
    import gzip

    from diagnose.evidence.redact import mask_file

    lines = [line.encode() for p in CORPUS for line in p.lines] + [b"caf\xe9 latin-1 \xff\xfe bytes", b"", b"\r"]
    raw = b"\n".join(lines) + b"\nno newline at the end"
    source, target = tmp_path / "train.log", tmp_path / "masked.log"
    source.write_bytes(raw)
    assert mask_file(source, target)
    masked = target.read_bytes()
    assert masked.count(b"\n") == raw.count(b"\n")
    assert [s for p in CORPUS for s in p.secrets if s.encode() in masked] == []
    assert masked.split(b"\n")[-4:] == raw.split(b"\n")[-4:]  # not UTF-8, untouched byte for byte
    gz_source, gz_target = tmp_path / "train.log.gz", tmp_path / "masked.log.gz"
    gz_source.write_bytes(gzip.compress(raw))
    assert mask_file(gz_source, gz_target) and gzip.decompress(gz_target.read_bytes()) == masked
    clean = tmp_path / "clean.log"
    clean.write_bytes(b"step 1 loss 2.3\nstep 2 loss 2.1\n")
    assert not mask_file(clean, tmp_path / "clean-copy.log")
    assert (tmp_path / "clean-copy.log").read_bytes() == clean.read_bytes()
