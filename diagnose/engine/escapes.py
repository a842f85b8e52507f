"""A piece's ANSI escape sequences taken out, as evidence/lines.ANSI_BYTES.sub would, with numpy
where it can: its loops release the GIL, `re` holds it.

Escape sequences are ~1 in 250 bytes of real training output (rich progress bars, coloured log
levels) and `re.sub` spends ~1 us on each under the GIL, so on a many-core scan the stripping was
serial work beside the parallel matching (0.6 s a GiB, as long as hyperscan's on one core). Here
the escape bytes are found with one vector compare, each CSI sequence is measured with a few
vector steps over all of them at once, and the bytes kept are gathered with a boolean mask.
Anything the vector steps do not settle (an OSC sequence, a CSI longer than _MAX_CSI bytes or
cut by the piece's end) goes to `re.sub`, so the result is always the same bytes.
"""

from __future__ import annotations

from typing import Any

from diagnose.engine.bytecount import numpy_for
from diagnose.evidence.lines import ANSI_BYTES

_MAX_CSI = 32  # bytes a CSI sequence may take before the regex decides
_BLOCK = 1024 * 1024  # bytes stripped at a time
_ESC, _CSI, _OSC = 0x1B, 0x5B, 0x5D


def strip_escapes(piece: memoryview, vector: bool = True) -> bytes:
    """`piece` without its ANSI escape sequences (lines and their numbers stay put: no sequence
    holds a '\r' or '\n'). `vector`: with numpy, where other threads scan meanwhile (on one
    thread the regex is as fast)."""
    np = numpy_for(len(piece)) if vector else None
    if np is None:
        return ANSI_BYTES.sub(b"", piece)
    # Block by block, each ending at a newline (no sequence spans one): a thread's temporaries stay
    # a few MiB, whatever the piece (16 threads x an 8 MiB piece's masks held 400 MB at once).
    out: list[bytes] = []
    start, size = 0, len(piece)
    while start < size:
        end = size if size - start <= _BLOCK else _block_end(piece, start + _BLOCK, size)
        block = piece[start:end]
        found = _strip_numpy(np, block)
        out.append(found if found is not None else ANSI_BYTES.sub(b"", block))
        start = end
    return out[0] if len(out) == 1 else b"".join(out)


def _block_end(piece: memoryview, at: int, size: int) -> int:
    """The end of a block: just past the first newline at or after `at` (else the piece's end)."""
    for reach in (4096, _BLOCK):  # a line is seldom longer than the first
        found = bytes(piece[at : min(size, at + reach)]).find(b"\n")
        if found >= 0:
            return at + found + 1
    return size


def _strip_numpy(np: Any, piece: memoryview) -> bytes | None:
    size = len(piece)
    data = np.frombuffer(piece, dtype=np.uint8)
    esc = np.flatnonzero(data == _ESC)
    if not len(esc):
        return bytes(piece)
    following = np.zeros(len(esc), dtype=np.uint8)
    inside = esc + 1 < size
    following[inside] = data[esc[inside] + 1]
    if (following == _OSC).any():
        return None  # OSC sequences (titles, links) run to a terminator: the regex reads them
    # 2-byte escapes: ESC and one of @-Z \ ] ^ _ (not '[': that opens a CSI)
    two = ((following >= 0x40) & (following <= 0x5A)) | ((following >= 0x5C) & (following <= 0x5F))
    starts = [esc[two]]
    lengths = [np.full(int(two.sum()), 2, dtype=np.int64)]
    csi = esc[following == _CSI]
    if len(csi):
        # ESC [ then parameter bytes 0-?, then intermediate bytes space-/, then one final byte @-~:
        # the classes do not overlap, so the one parse is the greedy one.
        at = csi + 2
        alive = np.ones(len(csi), dtype=bool)
        intermediate = np.zeros(len(csi), dtype=bool)
        length = np.zeros(len(csi), dtype=np.int64)
        for _ in range(_MAX_CSI):
            alive &= at < size  # cut by the piece's end: ESC stays, as the regex leaves it
            if not alive.any():
                break
            byte = np.zeros(len(csi), dtype=np.uint8)
            byte[alive] = data[at[alive]]
            final = alive & (byte >= 0x40) & (byte <= 0x7E)
            length[final] = (at - csi + 1)[final]
            parameter = (byte >= 0x30) & (byte <= 0x3F) & ~intermediate
            more = (byte >= 0x20) & (byte <= 0x2F)
            intermediate |= alive & more
            alive &= (parameter | more) & ~final
            at += 1
        else:
            if alive.any():
                return None
        ended = length > 0
        starts.append(csi[ended])
        lengths.append(length[ended])
    start = np.concatenate(starts)
    span = np.concatenate(lengths)
    if not len(start):
        return bytes(piece)
    # Every byte of every sequence at once: each start repeated over its length, plus 0, 1, ...
    # The mask's gather is slower than joining the slices between sequences, but it releases the
    # GIL, which a slice each holds.
    ends = np.cumsum(span)
    inside = np.repeat(start - (ends - span), span) + np.arange(int(ends[-1]))
    keep = np.ones(size, dtype=bool)
    keep[inside] = False
    return bytes(data[keep].data)
