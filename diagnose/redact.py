"""Mask secrets (API keys, tokens, passwords) in everything a report shows.

Training logs carry secrets: a launcher that echoes `export WANDB_API_KEY=...`, an HTTP debug dump
with its `Authorization:` header, a token in a URL. Reports end up in CI artifacts, issues and
code-scanning alerts, so every string of a Diagnosis is masked by `redact_diagnosis` before any
reporter sees it: diagnose.report.reporter() wraps every format with it, so no format (and no
caller) can skip it.

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
from pathlib import PurePath
from typing import Any, TypeVar

import regex

from diagnose.findings import Diagnosis

MASK = "***"
T = TypeVar("T")

# A value after `=`/`:` that is not a secret: nothing, a null, a boolean, a shell variable, a
# <placeholder>, or already masked.
_NOT_A_SECRET = (
    r"(?!\*\*\*)(?!(?:None|null|nil|NULL|true|false|True|False|\$\{?\w+\}?|<[^>\s]*>)(?:[\s'\",;)}\]]|$))"
    r"(?=[^\s'\"`,;)}\]]*[A-Za-z0-9])"  # a secret has letters or digits, not just punctuation
)
# A bare value never starts with a bracket: `key=[your_api_key]` is a placeholder or a list.
_VALUE = r"(?:(?P<q>['\"])(?P<quoted>(?!\*\*\*)[^'\"\n]+)(?P=q)|(?P<bare>(?![\[<({])" + _NOT_A_SECRET + r"[^\s'\"`,;)}\]]+))"

# Names whose value is a secret. Upper case: the environment-variable shapes the issue names
# (*_TOKEN=, *_KEY=, *_SECRET=, *PASSWORD=). Lower case only for names that cannot be anything
# else, so tokenizer fields (pad_token, eos_token) and dict keys like sort_key stay readable.
# Name prefixes are bounded ({0,64}): an unbounded run tried from every '_' of a long line of
# underscores is quadratic (a 200 KB line took 21 s).
_UPPER_NAMES = r"[A-Z0-9_]{0,64}(?:_TOKEN|_KEY|_SECRET|PASSWORD|_PASSWD|_PAT|_CREDENTIALS)"
_LOWER_NAMES = (
    r"(?i:aws_secret_access_key|secret_?access_?key|aws_access_key_id|aws_session_token|api_?key|"
    r"access_?token|auth_?token|refresh_?token|id_?token|bearer_?token|client_?secret|private_?key|"
    r"hf_?token|wandb_?api_?key|openai_?api_?key|[a-z0-9_]{0,64}password|passwd|[a-z0-9_]{1,64}_secret)"
)


class _Pattern:
    """A regex whose group 'secret' (or 'quoted'/'bare' of a value) is replaced by the mask."""

    def __init__(self, name: str, pattern: str, flags: int = 0, accept: Callable[[str], bool] | None = None,
                 engine: Any = re) -> None:
        self.name = name
        self.regex: Any = engine.compile(pattern, flags)
        # A test on the whole match done in code: a lookahead doing it is re-run from every
        # start inside a long run, which is quadratic.
        self.accept = accept

    def sub(self, text: str, found: set[str] | None = None) -> str:
        def mask(match: Any) -> str:  # a re.Match or a regex.Match
            whole: str = match.group(0)
            if self.accept is not None and not self.accept(whole):
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

        masked: str = self.regex.sub(mask, text)
        return masked


def _wandb_login(found: set[str] | None) -> Callable[[re.Match[str]], str]:
    # Any long word after `wandb login` is the key (flags such as --relogin are short).
    def mask(match: re.Match[str]) -> str:
        def one(word: re.Match[str]) -> str:
            if found is not None:
                found.add(word.group(0))
            return MASK

        return match.group("head") + _LONG_WORD.sub(one, match.group("args"))

    return mask


PATTERNS: tuple[_Pattern, ...] = (
    # https://user:password@host/...
    # (a scheme is short: unbounded, `a.a.a.…` is tried from every letter to its end)
    _Pattern("url-credentials", r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^/\s:@'\"]+:(?P<secret>[^@\s/'\"]+)@"),
    # Authorization: Bearer xxx / token xxx / Basic xxx (also as 'Authorization': '...' in a dict repr)
    _Pattern(
        "authorization-header",
        r"(?i)\b(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|token|basic|digest|bot|apikey|key)\s+)?"
        r"(?P<secret>(?!\*\*\*)(?!(?:bearer|token|basic|digest|bot|apikey|key)\s)(?=[^\s'\",;]*[A-Za-z0-9])[^\s'\",;]+)",
    ),
    _Pattern("api-key-header", r"(?i)\bx-(?:api|auth|access)-(?:key|token)['\"]?\s*[:=]\s*['\"]?(?P<secret>(?!\*\*\*)[^\s'\",;]+)"),
    _Pattern("bearer", r"(?i)\bbearer\s+(?P<secret>(?!\*\*\*)[A-Za-z0-9._~+/=-]{16,})"),
    # NAME=value, NAME: value, NAME="value", 'name': 'value'
    # The name is a lookbehind (the `regex` module's, of any width) so that a match is only tried
    # at an `=` or `:`: tried from every character before them it cost ~600 steps per '_'.
    _Pattern("assignment", r"(?<=(?<![A-Za-z0-9])(?:" + _UPPER_NAMES + r"|" + _LOWER_NAMES + r")\b['\"]?\s*)(?:=|:)\s*"
             + _VALUE, engine=regex),
    # Python keyword `key=` in a login call: wandb.login(key="...")
    _Pattern("login-key", r"\blogin\([^)]{0,512}?\bkey\s*=\s*" + _VALUE),
    # Token shapes, wherever they stand. The well-known prefix stays: it names the kind of token.
    _Pattern("huggingface", r"\b(?:hf_|api_org_)(?P<secret>[A-Za-z0-9]{30,})\b"),
    _Pattern("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_(?P<secret>[A-Za-z0-9]{30,})\b"),
    _Pattern("github-pat", r"\bgithub_pat_(?P<secret>[A-Za-z0-9_]{30,})\b"),
    _Pattern("gitlab", r"\bglpat-(?P<secret>[A-Za-z0-9_-]{20,})"),
    _Pattern("aws-access-key-id", r"\b(?:AKIA|ASIA|ABIA|ACCA)(?P<secret>[A-Z0-9]{16})\b"),
    # A digit in it, checked on the match (the token run is then consumed once, not per `sk-`).
    _Pattern("openai-style", r"\bsk-(?P<secret>[A-Za-z0-9_-]{20,})",
             accept=lambda whole: any(c.isdigit() for c in whole[3:])),
    _Pattern("slack", r"\bxox[abposr]-(?P<secret>[A-Za-z0-9-]{10,})"),
    _Pattern("google-api-key", r"\bAIza(?P<secret>[0-9A-Za-z_-]{35})\b"),
    _Pattern("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
)
_WANDB_LOGIN = re.compile(r"(?P<head>\bwandb\s+login\b)(?P<args>[^\n]*)")
_LONG_WORD = re.compile(r"(?<![\w-])[A-Za-z0-9_-]{32,}(?![\w-])")
# Cheap gate: a string with none of these cannot match any pattern above.
_GATE = re.compile(
    r"(?i)key|token|secret|passw|passwd|pwd|pat|credential|authoriz|bearer|://|login|hf_|api_org_|gh[pousr]_|"
    r"github_pat_|glpat-|AKIA|ASIA|ABIA|ACCA|sk-|xox|AIza|eyJ"
)
# A secret found in one place is masked wherever else it appears, even without the context that
# gave it away (a rule capture quoted alone in a title or a fix). Only token-like values are
# chased: masking every "checkpoint" because of a PASSWORD=checkpoint line would hide evidence.
MIN_CHASED = 8


def _token_like(value: str) -> bool:
    if len(value) < MIN_CHASED:
        return False
    classes = sum(1 for test in (str.islower, str.isupper, str.isdigit) if any(test(c) for c in value))
    return classes >= 2 or len(value) >= 20


def redact(text: str, found: set[str] | None = None) -> str:
    """The text with every secret replaced by ***; found (when given) collects the secrets masked."""
    if not text or not _GATE.search(text):
        return text
    text = _WANDB_LOGIN.sub(_wandb_login(found), text)
    for pattern in PATTERNS:
        text = pattern.sub(text, found)
    return text


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


def redact_diagnosis(diagnosis: Diagnosis) -> Diagnosis:
    """A copy of the diagnosis with secrets masked in every string it holds: cause titles,
    explanations, fixes, evidence lines, gaps, notes, run inputs, collected facts.

    Two passes: the first finds the secrets (by their shape or their NAME= context), the second
    masks them, and masks those values again wherever they stand alone."""
    found: set[str] = set()

    def collect(text: str) -> str:
        redact(text, found)
        return text

    _scrub(diagnosis, collect)
    chased = sorted((s for s in found if _token_like(s)), key=len, reverse=True)

    def mask(text: str) -> str:
        text = redact(text)
        for secret in chased:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    return scrub(diagnosis, mask)
