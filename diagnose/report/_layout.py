"""Text laid out for a terminal of a given width: paragraphs wrapped with hanging indents, long
log lines cut around what matched, small tables. Every line comes out already fitted, as a list
of (text, style) spans: a rich console only colours them and a pipe gets the same characters
without colour, so the two cannot drift apart (and writing to a pipe never imports rich).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

Span = tuple[str, str]  # (text, rich style; "" for none)
Line = list[Span]

ELLIPSIS = "…"


def cells(text: str) -> int:
    """Columns the text takes on a terminal: wide East Asian characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(_char_cells(ch) for ch in text)


def _char_cells(ch: str) -> int:
    if ch.isascii():
        return 1
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _take(text: str, width: int) -> tuple[str, str]:
    """The longest head of text that fits in width columns (at least one character), and the rest."""
    if text.isascii():
        return text[: max(width, 1)], text[max(width, 1):]
    used = 0
    for index, ch in enumerate(text):
        used += _char_cells(ch)
        if used > width and index > 0:
            return text[:index], text[index:]
    return text, ""


def _tokens(spans: Sequence[Span]) -> list[tuple[str, str, bool]]:
    """(text, style, is_space) pieces: words and the runs of spaces between them."""
    out: list[tuple[str, str, bool]] = []
    for text, style in spans:
        text = text.replace("\t", "    ")
        start = 0
        while start < len(text):
            space = text[start] == " "
            end = start
            while end < len(text) and (text[end] == " ") == space:
                end += 1
            out.append((text[start:end], style, space))
            start = end
    return out


def _append(line: Line, text: str, style: str) -> None:
    if line and line[-1][1] == style:
        line[-1] = (line[-1][0] + text, style)
    else:
        line.append((text, style))


def _rstrip(line: Line) -> Line:
    while line and not line[-1][0].rstrip(" "):
        line.pop()
    if line:
        line[-1] = (line[-1][0].rstrip(" "), line[-1][1])
    return line


def wrap(spans: Sequence[Span], width: int, first: str = "", hang: str | None = None,
         prefix_style: str = "", fold: bool = True) -> list[Line]:
    """Spans word-wrapped to width columns: the first line starts with `first`, the others with
    `hang` (default: as many spaces), so a paragraph keeps its indent; the spaces at a break are
    dropped. A word longer than a line is split (fold), or else kept whole on a line of its own
    (a path or an address: the terminal soft-wraps it, and it copies as one piece)."""
    hang = " " * cells(first) if hang is None else hang
    lines: list[Line] = []
    line: Line = [(first, prefix_style)] if first else []
    used = cells(first)
    room = max(width, cells(first) + 8)  # a narrow terminal still gets a few characters a line
    empty = True  # nothing but the prefix on this line yet
    for text, style, space in _tokens(spans):
        if space:
            if not empty:
                _append(line, text, style)
                used += len(text)
            continue
        while text:
            size = cells(text)
            if used + size <= room:
                _append(line, text, style)
                used += size
                empty = False
                break
            if not empty and (size <= room - cells(hang) or not fold):
                lines.append(_rstrip(line))  # break before the word
            elif not fold:
                _append(line, text, style)  # alone on its line, whole
                used += size
                empty = False
                break
            else:
                head, text = _take(text, room - used)  # split a word that fits no line
                _append(line, head, style)
                lines.append(_rstrip(line))
            line = [(hang, prefix_style)] if hang else []
            used, empty = cells(hang), True
    lines.append(_rstrip(line))
    return [ln for ln in lines if ln] or [[]]


def cut(text: str, match: str, budget: int) -> list[Span]:
    """A log line fitted into `budget` columns around the part that matched: the match shown
    (highlighted, as "match" style) with as much context as fits, cut ends marked with an
    ellipsis. Without a match (or one not found in the line) the head of the line is kept."""
    at = text.find(match) if match else -1
    if cells(text) <= budget:
        if at < 0:
            return [(text, "")]
        return [s for s in ((text[:at], ""), (match, "match"), (text[at + len(match):], "")) if s[0]]
    if at < 0:
        head, _rest = _take(text, budget - 1)
        return [(head, ""), (ELLIPSIS, "dim")]
    room = budget - cells(match) - 2  # two ellipses at most
    if room <= 0:  # the match alone is too long: its start, as much as fits
        head, _rest = _take(match, budget - (2 if at else 1))
        return [s for s in ((ELLIPSIS if at else "", "dim"), (head, "match"), (ELLIPSIS, "dim")) if s[0]]
    before_text, after_text = text[:at], text[at + len(match):]
    # A third of the room before the match, the rest after it (what follows a match - the
    # sizes, the timeout, the path - is what a fix refers to); what one side leaves goes to the other.
    before = min(cells(before_text), room // 3)
    after = min(cells(after_text), room - before)
    before = min(cells(before_text), room - after)
    spans: list[Span] = []
    if before < cells(before_text):
        kept = _tail(before_text, before)
        space = kept.find(" ")
        if 0 <= space < len(kept) // 2:
            kept = kept[space + 1:]  # start at a word
        spans += [(ELLIPSIS, "dim"), (kept, "")]
    elif before_text:
        spans.append((before_text, ""))
    spans.append((match, "match"))
    if after < cells(after_text):
        head, _rest = _take(after_text, after)
        space = head.rfind(" ")
        if space > len(head) * 2 // 3:
            head = head[:space]  # end at a word
        spans += [(head, ""), (ELLIPSIS, "dim")]
    elif after_text:
        spans.append((after_text, ""))
    return [s for s in spans if s[0]]


def _tail(text: str, width: int) -> str:
    if width <= 0:
        return ""
    if text.isascii():
        return text[-width:]
    used = 0
    for index in range(len(text) - 1, -1, -1):
        used += _char_cells(text[index])
        if used > width:
            return text[index + 1:]
    return text


def clip(spans: Sequence[Span], width: int) -> list[Span]:
    """Spans cut to width columns, an ellipsis marking the cut."""
    if sum(cells(text) for text, _ in spans) <= width:
        return list(spans)
    out: list[Span] = []
    room = width - 1  # the ellipsis takes the last column
    for text, style in spans:
        size = cells(text)
        if size <= room:
            out.append((text, style))
            room -= size
            continue
        head = _take(text, room)[0] if room > 0 else ""
        if head and cells(head) <= room:
            out.append((head.rstrip(" "), style))
        break
    out.append((ELLIPSIS, "dim"))
    return out


def table(header: Sequence[str], rows: Sequence[Sequence[Sequence[Span]]], width: int, indent: str = "  ",
          minimum: Sequence[int] = (), max_lines: int = 2, gap: int = 2) -> list[Line]:
    """A table fitted to width: columns start at their natural width and the widest gives way
    first, down to its minimum; a cell too long for its column wraps over up to max_lines lines,
    the last one cut with an ellipsis."""
    count = len(header)
    natural = [cells(h) for h in header]
    for row in rows:
        for col, cell in enumerate(row):
            natural[col] = max(natural[col], sum(cells(t) for t, _ in cell))
    mins = [max(cells(header[c]), minimum[c] if c < len(minimum) else 6) for c in range(count)]
    widths = list(natural)
    room = width - cells(indent) - gap * (count - 1)
    while sum(widths) > room:
        shrinkable = [c for c in range(count) if widths[c] > mins[c]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda c: widths[c])
        widths[widest] -= 1
    lines = _rows([[(h, "bold")] for h in header], widths, indent, gap, 1)
    for row in rows:
        lines.extend(_rows(row, widths, indent, gap, max_lines))
    return lines


def _rows(row: Sequence[Sequence[Span]], widths: Sequence[int], indent: str, gap: int, max_lines: int) -> list[Line]:
    wrapped: list[list[Line]] = []
    for col, cell in enumerate(row):
        lines = wrap(list(cell), widths[col])
        if len(lines) > max_lines:
            lines = lines[:max_lines]
            lines[-1] = clip([*lines[-1], (" " + ELLIPSIS, "dim")], widths[col])
        wrapped.append(lines)
    height = max(len(c) for c in wrapped)
    out: list[Line] = []
    for n in range(height):
        line: Line = [(indent, "")]
        for col, lines in enumerate(wrapped):
            part = lines[n] if n < len(lines) else []
            used = sum(cells(t) for t, _ in part)
            line.extend(part)
            if col < len(wrapped) - 1:
                line.append((" " * (widths[col] - used + gap), ""))
        out.append(_rstrip(line))
    return out
