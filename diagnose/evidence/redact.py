"""Mask secrets (API keys, tokens, passwords) in everything a report shows.

Training logs carry secrets: a launcher that echoes `export WANDB_API_KEY=...`, an HTTP debug dump
with its `Authorization:` header, a token in a URL. Reports end up in CI artifacts, issues and
code-scanning alerts, so every string of a Diagnosis is masked (report/redact.py) before any
reporter sees it, and every bundle `diagnose collect` writes is masked at capture (bundle.py).
This module is the text half: patterns, line and file masking, `scrub` over dataclasses.

The patterns aim at secrets, not at every word near "key": `WANDB_API_KEY set=True` and
`hf_hub_download(` stay as they are, `eos_token='</s>'` too. Values that are clearly not a
secret (None, true/false, $VARIABLE, <placeholder>, an already masked ***) are left alone,
which also makes masking idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from pathlib import Path, PurePath
from typing import Any, BinaryIO, TypeVar

MASK = "***"
T = TypeVar("T")

# Whitespace between a name and its value. Never a newline: no pattern may match across lines,
# so masking a file chunk by chunk (diagnose collect) masks exactly what masking it line by line
# would, and a line keeps its number.
_SP = r"[ \t]"
# A value after `=`/`:` that is not a secret: nothing, a null, a boolean, a shell variable, a
# <placeholder>, or already masked. Every repeat is bounded, so a 200 KB line costs linear time.
_NOT_A_SECRET = (
    r"(?!\*\*\*)(?!(?:None|null|nil|NULL|true|false|True|False|\$\{?\w{1,128}\}?|<[^>\s]{0,128}>)(?:[\s'\",;)}\]]|$))"
    r"(?![^\s'\"`,;)}\]]{0,16}(?:\.\.\.|\u2026)(?:[\s'\",;)}\]]|$))"  # an elided example: HF_TOKEN=hf_...
    r"(?=[^\s'\"`,;)}\]]{0,64}[A-Za-z0-9])"  # a secret has letters or digits, not just punctuation
)
# A bare value never starts with a bracket: `key=[your_api_key]` is a placeholder or a list.
# A bare value ends at a backslash too: in a repr or JSON string `\n` starts the next line.
_VALUE = (r"(?:(?P<q>['\"])(?P<quoted>(?!\*\*\*)[^'\"\n]{1,4096})(?P=q)|(?P<bare>(?![\[<({-])" + _NOT_A_SECRET
          + r"[^\s'\"`,;)}\]\\]{1,4096}))")
# A value that must look generated (letters and digits, 8+ characters, no dots) because its name
# is also an everyday word: `key=lambda`, `token=self.token`, `key: model.layers.0.weight` stay.
_TOKEN_CHARS = r"A-Za-z0-9_\-+/=~%"
_TOKEN_VALUE = (
    r"(?P<tq>['\"]?)(?P<secret>(?!\*\*\*)(?=[" + _TOKEN_CHARS + r"]{0,63}[0-9])(?=[" + _TOKEN_CHARS + r"]{0,63}[A-Za-z])"
    r"[" + _TOKEN_CHARS + r"]{8,4096}+)(?![" + _TOKEN_CHARS + r".])"  # possessive: a long run fails once, not 4096 times
)

# Names whose value is a secret. Upper case: the environment-variable shapes the issue names
# (*_TOKEN=, *_KEY=, *_SECRET=, *PASSWORD=). Lower case only for names that cannot be anything
# else, so tokenizer fields (pad_token, eos_token) and dict keys like sort_key stay readable.
_UPPER_NAMES = r"(?:_TOKEN|_KEY|_SECRET|PASSWORD|_PASSWD|_PAT|_CREDENTIALS)"  # after any [A-Z0-9_] prefix
_LOWER_NAMES = (  # matched with re.I
    r"(?:aws_secret_access_key|secret_?access_?key|aws_access_key_id|aws_session_token|api_?key|"
    r"access_?token|auth_?token|refresh_?token|id_?token|bearer_?token|client_?secret|private_?key|"
    r"hf_?token|wandb_?api_?key|openai_?api_?key|passwd|"
    r"AccountKey|SharedAccessKey|_authToken)"
)
# Command-line flags that take a secret: --hf_token V, --api-key=V, --wandb-key V, --password V.
# A bare --key is left alone (sort --key 2, openssl -key file.pem); --pad_token </s> too.
_FLAG_PREFIX = r"(?:hf|hub|huggingface|wandb|api|auth|access|github|gh|gitlab|openai|refresh|id|bearer|slack|client|" \
               r"aws|comet|neptune|mlflow|private|secret|session|personal|push[-_]to[-_]hub)"
_FLAG_NAMES = (r"(?i:(?:" + _FLAG_PREFIX + r"[-_])?(?:token|api[-_]?key|apikey|secret|password|passwd|pat)|"
               + _FLAG_PREFIX + r"[-_]key)")


# A pattern that starts at a word start (\b, or a lookbehind for "no word character before")
# also starts right after a literal \n, \t or \r: the escapes of a repr or a JSON string (a
# command line quoting a script, wandb's debug log) glue the next word to an "n".
_ESCAPE = r"(?<=\\[nrt])"
_WORD_START = re.compile(r"(?:\\b|\(\?<!\[((?:[^\]\\]|\\.){1,40})\]\))")


def _split_start(pattern: str) -> tuple[str, re.Pattern[str] | None]:
    """(pattern, the character class a match may not follow). A leading boundary is taken out of
    the regex and checked on the match instead: a regex that starts with a literal is searched
    for with a fast literal scan (~100x faster on a MB of log than one that starts with \b)."""
    flags = re.match(r"\(\?[a-z]+\)", pattern)
    head, rest = (flags.group(0), pattern[flags.end():]) if flags else ("", pattern)
    start = _WORD_START.match(rest)
    if start is None:
        return pattern, None
    before = re.compile(f"[{start.group(1)}]" if start.group(1) else r"\w")
    return head + rest[start.end():], before


ANCHORED_FROM = 4096  # texts this long or longer are searched from their hints (see _Pattern.anchored)


class _Pattern:
    """A regex whose group 'secret' (or 'quoted'/'bare' of a value) is replaced by the mask.

    hints: lower-case strings one of which must be in the text for the pattern to match at all;
    checked with `in` before the regex runs, so a big chunk of log costs little per pattern.
    accept: a further check of a match (its context), for what a bounded regex cannot say."""

    def __init__(self, name: str, pattern: str, hints: tuple[str, ...], flags: int = 0,
                 accept: Callable[[re.Match[str]], bool] | None = None, anchored: bool = False) -> None:
        self.name = name
        self._pattern, self._flags = pattern, flags
        self._regex: re.Pattern[str] | None = None
        self._before: re.Pattern[str] | None = None
        self.hints = hints
        self.accept = accept
        # anchored: every match starts with one of the hints (case aside). A case-insensitive
        # regex gets no fast literal scan, so in a long text the hints are found with str.find
        # in the lower-cased text and the regex is only tried there.
        self.anchored = anchored

    def _compile(self) -> re.Pattern[str]:
        # Compiled on first use: most reports hold no text that passes a pattern's hints, and
        # compiling all of them costs a small scan's start-up ~20 ms.
        body, self._before = _split_start(self._pattern)
        self._regex = re.compile(body, self._flags)
        return self._regex

    @property
    def regex(self) -> re.Pattern[str]:
        return self._regex if self._regex is not None else self._compile()

    @property
    def before(self) -> re.Pattern[str] | None:
        if self._regex is None:
            self._compile()
        return self._before

    def applies(self, lowered: str) -> bool:
        return any(h in lowered for h in self.hints)

    def _starts_a_word(self, match: re.Match[str]) -> bool:
        return self._word_start(match.string, match.start())

    def _word_start(self, text: str, at: int) -> bool:
        if self.before is None or at == 0 or not self.before.match(text, at - 1):
            return True
        return at >= 2 and text[at - 2] == "\\" and text[at - 1] in "nrt"

    def sub(self, text: str, found: set[str] | None = None, lowered: str | None = None) -> str:
        def mask(match: re.Match[str]) -> str:
            whole = match.group(0)
            if not self._starts_a_word(match) or (self.accept is not None and not self.accept(match)):
                return whole
            start = match.start(0)
            for group in ("secret", "quoted", "bare"):
                if group in match.re.groupindex and match.group(group) is not None:
                    s, e = match.span(group)
                    if found is not None:
                        found.add(match.group(group))
                    return whole[: s - start] + MASK + whole[e - start:]
            if found is not None:
                found.add(whole)
            return MASK

        if not self.anchored or len(text) < ANCHORED_FROM or lowered is None or len(lowered) != len(text):
            return self.regex.sub(mask, text)
        starts: set[int] = set()
        for hint in self.hints:
            at = lowered.find(hint)
            while at >= 0:
                starts.add(at)
                at = lowered.find(hint, at + 1)
        parts: list[str] = []
        last = 0
        for at in sorted(starts):
            # The boundary first: a match tried inside a long word would cost its whole length.
            match = self.regex.match(text, at) if at >= last and self._word_start(text, at) else None
            if match is None or not match.group(0):
                continue
            masked = mask(match)
            if masked != match.group(0):
                parts += [text[last:at], masked]
                last = match.end()
        return "".join(parts) + text[last:] if parts else text


_NETRC_CONTEXT = re.compile(r"\b(?:machine|default)\b")


def _netrc(match: re.Match[str]) -> bool:
    # `password KEY` on a netrc line (after machine/default), or alone on its line.
    text = match.string
    line_start = text.rfind("\n", 0, match.start()) + 1
    before = text[max(line_start, match.start() - 512): match.start()]
    return (line_start >= match.start() - 512 and not before.strip()) or bool(_NETRC_CONTEXT.search(before))


def _wandb_login(found: set[str] | None) -> Callable[[re.Match[str]], str]:
    # Any long word after `wandb login` is the key (flags such as --relogin are short).
    def mask(match: re.Match[str]) -> str:
        def one(word: re.Match[str]) -> str:
            if found is not None:
                found.add(word.group(0))
            return MASK

        return match.group("head") + _LONG_WORD.sub(one, match.group("args"))

    return mask


# Sources of the shapes: detect-secrets 1.5 plugins (aws, basic_auth, github_token, gitlab_token,
# slack, stripe, pypi_token, npm, sendgrid, azure_storage_key, telegram_token, twilio, mailchimp,
# private_key, jwt) and gitleaks' rules of the same names. Not the package itself: importing it
# costs ~0.15 s with its plugins, it pulls in requests, and its scan_line takes ~1 ms a line (a
# 10-million-line log would take hours to bundle); its keyword and entropy plugins flag words
# such as "machine" and "login". Ported, with every repeat bounded.
PATTERNS: tuple[_Pattern, ...] = (
    # netrc: `machine api.wandb.ai login user password KEY`, or `password KEY` alone on its line
    # (the multi-line form). Before the URL patterns so a netrc line is masked as a whole.
    _Pattern("netrc-password", r"\bpassword" + _SP + r"{1,16}(?P<secret>(?!\*\*\*)[^\s]{1,1024})", ("password",),
             accept=_netrc),
    # https://user:password@host/... with an empty user (https://:pw@host) or a password holding a
    # `/` (postgres://u:p/ss@h). `host:8080/x@y` is a port, not a password.
    _Pattern("url-credentials",
             r"://[^\s:@/?#'\"]{0,128}:(?!\d{1,5}(?:[/?#\s'\"]|$))"
             r"(?P<secret>(?!\*\*\*@)[^\s@'\"]{1,128}?)@", ("://",)),
    # git+https://<token>@github.com/...: a user part alone that looks generated is a token.
    _Pattern("url-token",
             r"://(?P<secret>(?!\*\*\*@)(?=[^\s:@/?#'\"]{0,127}\d)"
             r"(?=[^\s:@/?#'\"]{0,127}[A-Za-z])[^\s:@/?#'\"]{16,128})@", ("://",)),
    # Secrets in query strings: Azure SAS `sig=`, `?access_token=` (the name patterns below).
    _Pattern("url-signature", r"[?&](?:sig|signature|X-Amz-Signature|X-Goog-Signature)=(?P<secret>[A-Za-z0-9%+/=_-]{16,1024})",
             ("sig",)),
    # Authorization: Bearer xxx / token xxx / Basic xxx (also as 'Authorization': '...' in a dict repr)
    _Pattern(
        "authorization-header",
        r"(?i)authorization['\"]?" + _SP + r"{0,16}[:=]" + _SP + r"{0,16}['\"]?"
        r"(?:(?:bearer|token|basic|digest|bot|apikey|key)" + _SP + r"{1,16})?"
        r"(?P<secret>(?!\*\*\*)(?!(?:bearer|token|basic|digest|bot|apikey|key)\s)(?=[^\s'\",;]{0,64}[A-Za-z0-9])"
        r"[^\s'\",;]{1,4096})", ("authoriz",), anchored=True),
    _Pattern("api-key-header",
             r"(?i)\bx-(?:api|auth|access)-(?:key|token)['\"]?" + _SP + r"{0,16}[:=]" + _SP
             + r"{0,16}['\"]?(?P<secret>(?!\*\*\*)[^\s'\",;]{1,4096})", ("x-",), anchored=True),
    _Pattern("bearer", r"(?i)\bbearer" + _SP + r"{1,16}(?P<secret>(?!\*\*\*)[A-Za-z0-9._~+/=-]{16,4096})", ("bearer",),
             anchored=True),
    # aws_secret_access_key tV9L... (aws configure list, a credentials file) and the quoted form.
    _Pattern("aws-secret-key",
             r"(?i)secret_?(?:access_?)?key\b['\"]?(?:" + _SP + r"{0,16}[:=]" + _SP + r"{0,16}|" + _SP
             + r"{1,16})['\"]?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])", ("secret",),
             anchored=True),
    # NAME=value, NAME: value, NAME="value", 'name': 'value'. Each starts with its literal names
    # (fast to search for); upper-case names and *password/*_secret take any prefix.
    _Pattern("assignment", _UPPER_NAMES + r"\b['\"]?" + _SP + r"{0,16}(?:=|:)" + _SP + r"{0,16}" + _VALUE,
             ("key", "token", "secret", "passw", "pat", "credential")),
    _Pattern("assignment-lower", r"(?i)(?<![A-Za-z0-9_])" + _LOWER_NAMES + r"\b['\"]?" + _SP + r"{0,16}(?:=|:)" + _SP
             + r"{0,16}" + _VALUE, ("aws_", "secret", "api", "access", "auth", "refresh", "id_", "idtoken", "bearer",
                                    "client", "private", "hf", "wandb", "openai", "passwd", "accountkey",
                                    "sharedaccesskey", "_authtoken"), anchored=True),
    _Pattern("assignment-lower-suffix", r"(?i)(?:password|_secret)\b['\"]?" + _SP + r"{0,16}(?:=|:)" + _SP + r"{0,16}" + _VALUE,
             ("password", "_secret"), anchored=True),
    # Everyday names whose value is a secret only when it looks generated: key=, secret=, token=.
    _Pattern("lowercase-assignment",
             r"(?i)(?<![A-Za-z0-9_.-])(?:(?:secret|token|api_token|apitoken|pass)['\"]?" + _SP + r"{0,16}[=:]|key['\"]?"
             + _SP + r"{0,16}=)" + _SP + r"{0,16}" + _TOKEN_VALUE, ("key", "secret", "token", "pass", "api_token", "apitoken"),
             anchored=True),
    # Flags on a command line (torchrun ... --hf_token V, --api-key=V); the value never starts with -.
    # Two dashes: a literal start is fast to search for, and one-dash secret flags are rare.
    _Pattern("cli-flag", r"(?<![\w-])--" + _FLAG_NAMES + r"(?![\w-])(?:=|" + _SP + r"{1,16})" + _VALUE,
             ("key", "token", "secret", "passw", "pat")),
    # `password <pw>` in prose or a command (mysql ... password Zq8#mK2!); only a value that is
    # not a plain word, so "password authentication failed" stays readable.
    _Pattern("password-word",
             r"(?i)\b(?:password|passwd)" + _SP + r"{1,16}(?P<q>['\"]?)(?P<secret>(?!\*\*\*)"
             r"(?=[^\s'\"]{0,63}[0-9!#$%^&*@+=~?])(?=[^\s'\"]{0,63}[A-Za-z])[^\s'\"]{6,1024})", ("passw",),
             anchored=True),
    # Python keyword `key=` in a login call: wandb.login(key="...")
    _Pattern("login-key", r"\blogin\([^)\n]{0,128}?\bkey" + _SP + r"{0,16}=" + _SP + r"{0,16}" + _VALUE, ("login(",)),
    # Token shapes, wherever they stand. The well-known prefix stays: it names the kind of token.
    _Pattern("huggingface", r"\b(?:hf_|api_org_)(?P<secret>[A-Za-z0-9]{30,256})\b", ("hf_", "api_org_")),
    _Pattern("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_(?P<secret>[A-Za-z0-9]{30,256})\b", ("gh",)),
    _Pattern("github-pat", r"\bgithub_pat_(?P<secret>[A-Za-z0-9_]{30,256})\b", ("github_pat_",)),
    _Pattern("gitlab", r"\b(?:glpat|gldt|glft|glsoat|glrt|glptt|glagent|gloas|glcbt)-(?P<secret>[A-Za-z0-9_-]{20,1024})",
             ("gl",)),
    _Pattern("aws-access-key-id", r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])(?P<secret>[A-Z0-9]{16})\b",
             ("akia", "asia", "abia", "acca", "a3t")),
    _Pattern("openai-style", r"\bsk-(?P<secret>(?=[A-Za-z0-9_-]{0,255}\d)[A-Za-z0-9_-]{20,1024})", ("sk-",)),
    _Pattern("stripe", r"\b(?:sk|rk|pk)_(?:live|test)_(?P<secret>[0-9a-zA-Z]{24,256})\b", ("_live_", "_test_")),
    _Pattern("pypi", r"\bpypi-(?P<secret>AgE[A-Za-z0-9_-]{50,1024})", ("pypi-",)),
    _Pattern("npm", r"\bnpm_(?P<secret>[A-Za-z0-9]{36,256})\b", ("npm_",)),
    _Pattern("sendgrid", r"\bSG\.(?P<secret>[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})", ("sg.",)),
    _Pattern("slack", r"\bxox[abposr]-(?P<secret>[A-Za-z0-9-]{10,1024})", ("xox",)),
    _Pattern("slack-webhook", r"(?i)hooks\.slack\.com/(?:services|workflows)/(?P<secret>[A-Za-z0-9_/]{20,512})",
             ("hooks.slack",), anchored=True),
    _Pattern("google-api-key", r"\bAIza(?P<secret>[0-9A-Za-z_-]{35})\b", ("aiza",)),
    _Pattern("telegram-bot", r"\b\d{8,10}:(?P<secret>AA[0-9A-Za-z_-]{33})\b", (":aa",)),
    _Pattern("twilio", r"\b(?:AC|SK)(?P<secret>[a-f0-9]{32})\b", ("ac", "sk")),
    _Pattern("mailchimp", r"\b(?P<secret>[0-9a-f]{32})-us\d{1,2}\b", ("-us",)),
    _Pattern("jwt", r"\beyJ[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}", ("eyj",)),
    # A PEM body line (64 base64 characters, all three classes) standing alone: what is left of a
    # private key when the lines around it were not kept (a report shows a few evidence lines).
    # Only in short texts (PEM_LINE_TEXT): in a file the block's BEGIN line is there for the Masker.
    _Pattern("pem-body-line",
             r"(?m)(?:^|(?<=[\s:\]|>]))(?P<secret>(?=[A-Za-z0-9+/]{0,63}[A-Z])(?=[A-Za-z0-9+/]{0,63}[a-z])"
             r"(?=[A-Za-z0-9+/]{0,63}[0-9])[A-Za-z0-9+/]{64})" + _SP + r"{0,16}\r?$", ("",)),
)
PEM_LINE_TEXT = 4096  # texts up to this long (evidence lines, titles) get the lone PEM line check
_WANDB_LOGIN = re.compile(r"(?P<head>wandb" + _SP + r"{1,16}login\b)(?P<args>[^\n]*)")
_LONG_WORD = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{32,4096}(?![\w-])")
# Cheap gate: a string with none of these cannot match any pattern above.
_GATE = re.compile(
    r"(?i)key|token|secret|passw|passwd|pwd|pat|credential|authoriz|bearer|://|login|hf_|api_org_|gh[pousr]_|"
    r"github_pat_|gl[a-z]{1,6}-|AKIA|ASIA|ABIA|ACCA|A3T|sk-|xox|AIza|eyJ|sig|_live_|_test_|pypi-|npm_|SG\.|hooks\.slack|"
    r"-us\d|:AA|(?-i:(?:AC|SK)[a-f0-9]{32})|(?-i:[A-Za-z0-9+/]{64})|PRIVATE KEY|machine"
)

# PEM private keys: the body lines between BEGIN and END ... PRIVATE KEY, each its own line
# (perhaps behind a log prefix), or all on one line with literal \n (a JSON service-account key).
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")
# Inside a block: a line's last word when it is base64 (the body line, perhaps short, perhaps
# behind a log prefix such as "[rank0]: ", which stays) and every long base64 run. Right after
# BEGIN on the same line (a JSON key with literal \n) no prefix can stand: every run goes.
_PEM_TAIL = re.compile(r"(?:^|(?<=[\s:\]|>\\]))[A-Za-z0-9+/]{1,4096}={0,2}(?=" + _SP + r"{0,16}\r?$)")
_PEM_LONG_RUN = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,4096}={0,2}(?![A-Za-z0-9+/=])")
_PEM_RUN = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{4,4096}={0,2}(?![A-Za-z0-9+/=])")
# What a line inside a block looks like: ends in base64, is empty, or is an RFC 1421 header
# (Proc-Type: 4,ENCRYPTED). Any other line means the block was cut short: the state ends there.
_PEM_BODY = re.compile(r"(?:^|[\s:\]|>\\])[A-Za-z0-9+/]{1,4096}={0,2}" + _SP + r"{0,16}\r?$|^\s{0,64}\r?$|^[A-Za-z-]{1,32}:")
PEM_MAX_LINES = 400  # a 16384-bit RSA key is ~200 lines; past that the "block" is no key


class Masker:
    """Masks text a line at a time, remembering a PEM block opened in an earlier call: body lines
    reach it one by one when a file is copied in chunks, or as separate evidence lines."""

    def __init__(self, found: set[str] | None = None) -> None:
        self.found = found
        self.pem_lines = 0  # lines seen in the open block; 0 when no block is open

    def __call__(self, text: str) -> str:
        if self.pem_lines or "PRIVATE KEY" in text:
            text = "\n".join(self._pem_line(line) for line in text.split("\n"))
        if not text or not _GATE.search(text):
            return text
        return _redact(text, self.found)

    def _pem_line(self, line: str) -> str:
        out: list[str] = []
        pos = 0
        while True:
            if not self.pem_lines:
                begin = _PEM_BEGIN.search(line, pos)
                if begin is None:
                    out.append(line[pos:])
                    return "".join(out)
                out.append(line[pos:begin.end()])
                pos, self.pem_lines = begin.end(), 1
            elif pos == 0 and not _PEM_BODY.search(line) and not _PEM_END.search(line):
                self.pem_lines = 0  # the block was cut short: this line is not part of it
                continue
            end = _PEM_END.search(line, pos)
            stop = end.start() if end else len(line)
            if pos:  # right after BEGIN on this line
                out.append(_PEM_RUN.sub(self._mask_run, line[pos:stop]))
            else:
                out.append(_PEM_TAIL.sub(self._mask_run, _PEM_LONG_RUN.sub(self._mask_run, line[:stop])))
            if end is None:
                self.pem_lines = self.pem_lines + 1 if self.pem_lines < PEM_MAX_LINES else 0
                return "".join(out)
            out.append(line[stop:end.end()])
            pos, self.pem_lines = end.end(), 0

    def _mask_run(self, match: re.Match[str]) -> str:
        if self.found is not None:
            self.found.add(match.group(0))
        return MASK


# A secret found in one place is masked wherever else it appears, even without the context that
# gave it away (a rule capture quoted alone in a title or a fix). Only token-like values are
# chased: masking every "checkpoint" because of a PASSWORD=checkpoint line would hide evidence.
MIN_CHASED = 8


def token_like(value: str) -> bool:
    if len(value) < MIN_CHASED:
        return False
    classes = sum(1 for test in (str.islower, str.isupper, str.isdigit) if any(test(c) for c in value))
    return classes >= 2 or len(value) >= 20


def redact(text: str, found: set[str] | None = None) -> str:
    """The text with every secret replaced by ***; found (when given) collects the secrets masked.

    Never adds or removes a line break, and no pattern matches across one: a masked file keeps
    its line numbers. A PEM block inside text is masked whole; for one split over several calls
    use a Masker."""
    if not text or not _GATE.search(text):
        return text
    if "PRIVATE KEY" in text:
        return Masker(found)(text)
    return _redact(text, found)


# A bare AWS secret access key: 40 base64 characters with upper and lower case, on the line of
# an access key id (a credentials CSV `AKIA...,wJalr...`, `aws configure list`). Git SHAs (hex,
# lower case) beside an id stay.
_AWS_ID = re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b")  # literal first: fast to search
_AWS_BARE_SECRET = re.compile(r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])[A-Za-z0-9/+]{40}"
                              r"(?![A-Za-z0-9/+=])")
AWS_NEAR = 512  # characters either side of an id searched for its secret


def _aws_pairs(text: str, found: set[str] | None) -> str:
    windows: list[list[int]] = []
    for match in _AWS_ID.finditer(text):
        # Stay on the id's line: "near" never reaches into the next line.
        lo = max(text.rfind("\n", 0, match.start()) + 1, match.start() - AWS_NEAR)
        hi = text.find("\n", match.end())
        hi = min(len(text) if hi < 0 else hi, match.end() + AWS_NEAR)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)  # overlapping windows are searched once
        else:
            windows.append([lo, hi])
    spans = [m.span() for lo, hi in windows for m in _AWS_BARE_SECRET.finditer(text, lo, hi)]
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for start, end in spans:
        if found is not None:
            found.add(text[start:end])
        parts += [text[last:start], MASK]
        last = end
    return "".join(parts) + text[last:]


def _redact(text: str, found: set[str] | None) -> str:
    lowered = text.lower()
    if "akia" in lowered or "asia" in lowered or "abia" in lowered or "acca" in lowered or "a3t" in lowered:
        text = _aws_pairs(text, found)
    short = len(text) <= PEM_LINE_TEXT
    if "login" in lowered:
        text = _WANDB_LOGIN.sub(_wandb_login(found), text)
    if len(text) != len(lowered) or text.lower() != lowered:  # masked above: offsets moved
        lowered = text.lower()
    for pattern in PATTERNS:
        if pattern.applies(lowered) and (short or pattern.name != "pem-body-line"):
            masked = pattern.sub(text, found, lowered)
            if masked != text:
                text, lowered = masked, masked.lower()
    return text


CHUNK = 1 << 20  # bytes of whole lines masked at a time when copying a file


def mask_stream(source: BinaryIO, target: BinaryIO) -> bool:
    """Copy source to target with every secret masked, chunk by chunk of whole lines; True when
    anything was masked. Bytes are decoded as UTF-8 with surrogateescape, so a file that is not
    UTF-8 (or has a cut multi-byte character) comes out byte for byte where nothing was masked,
    and no line is added or removed: line numbers in the copy are those of the original."""
    masker = Masker()
    changed = False
    while True:
        lines = source.readlines(CHUNK)
        if not lines:
            return changed
        data = b"".join(lines)
        text = data.decode("utf-8", "surrogateescape")
        masked = masker(text)
        if masked != text:
            changed = True
            data = masked.encode("utf-8", "surrogateescape")
        target.write(data)


def mask_bytes(data: bytes) -> bytes:
    """`data` with every secret masked (see mask_stream)."""
    text = data.decode("utf-8", "surrogateescape")
    masked = Masker()(text)
    return data if masked == text else masked.encode("utf-8", "surrogateescape")


_OPENERS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def mask_file(source: Path, target: Path) -> bool:
    """Write a masked copy of source at target; a .gz/.bz2/.xz file is masked inside and written
    compressed the same way. True when anything was masked."""
    import importlib

    module = _OPENERS.get(source.suffix.lower())
    if module is None:
        with open(source, "rb") as src, open(target, "wb") as dst:
            return mask_stream(src, dst)
    opener = importlib.import_module(module).open
    with opener(source, "rb") as src, opener(target, "wb") as dst:
        return mask_stream(src, dst)


def scrub(value: T, mask: Callable[[str], str] = redact) -> T:
    """A copy of value (dataclasses, tuples, lists, mappings, strings) with every string masked.

    Paths are left alone (they are where evidence is read from, never shown as such), and so
    are enum members (str-valued enums are values of a closed set, not text from a log).
    """
    return _scrub(value, mask)  # type: ignore[no-any-return]


def _scrub(value: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(value, (Enum, PurePath, bool, int, float)) or value is None:
        return value
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, tuple):
        return tuple(_scrub(v, mask) for v in value)
    if isinstance(value, list):
        return [_scrub(v, mask) for v in value]
    if isinstance(value, Mapping):
        return {k: _scrub(v, mask) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _scrub(getattr(value, f.name), mask) for f in fields(value) if f.init}
        return replace(value, **changes)
    return value
