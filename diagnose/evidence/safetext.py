"""Text from logs and file names made safe to show: control characters become visible escapes.

A log line or a file name is attacker-controlled text. Written raw it can reset a terminal
(ESC c), move the cursor and overwrite what was printed (ESC 7/8, CSI s/u), switch to the line
drawing charset (ESC ( 0, SO/SI), set the window title or plant a hyperlink (OSC), reorder what
is shown (the bidi overrides U+202A-202E, U+2066-2069) or, through a newline, start a line of
its own that CI reads as a command (`::error ...`). `visible` replaces every such character
by an escape you can read (`\\x1b`, `\\u202e`); a name that is not UTF-8 (its bytes kept by
Python as lone surrogates, b'\\xff' -> '\\udcff') shows its bytes the same way (`\\xff`), so
no output format fails to encode it.
"""

from __future__ import annotations

import re

# C0 except TAB, DEL, C1; the bidi embeddings, overrides and isolates; the marks (LRM, RLM, ALM);
# the Unicode line/paragraph separators (a line break to some viewers); every surrogate.
UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: show it as backslashreplace does
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def visible(text: str) -> str:
    """The text with every control, bidi and surrogate character replaced by a visible escape."""
    if not UNSAFE.search(text):
        return text
    return UNSAFE.sub(_escape, text)


def visible_name(name: str | bytes) -> str:
    """A file name as reports show it: bytes decoded as the OS does, then made visible."""
    import os

    return visible(os.fsdecode(name) if isinstance(name, bytes) else name)
