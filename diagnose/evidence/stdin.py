"""`diagnose scan -`: standard input as one of the scanned files.

Standard input may be a pipe, which the scanner never opens (a FIFO can block a read forever),
so it is copied to a file in a private temp folder first, removed when the scan is done (and on
SIGTERM, see tempdirs). The copy is bounded: past MAX_STDIN bytes the rest is not read and a
note says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from diagnose.errors import InputError
from diagnose.evidence.sniff import split_kind

STDIN = "-"
MAX_STDIN = 4 << 30  # bytes of standard input kept (4 GiB): a runaway pipe must not fill the disk
CHUNK = 1 << 20
NAME = "stdin"  # the copy's file name
DISPLAY = "<stdin>"  # how reports name it


def _is_stdin(arg: str) -> bool:
    """`-`, or `KIND:-` with a KIND the scanner knows (`notakind:-` is a file of that name)."""
    return split_kind(arg)[1] == STDIN


def _replace(arg: str, copy: str) -> str:
    return arg[: -len(STDIN)] + copy if _is_stdin(arg) else arg


@contextlib.contextmanager
def stdin_paths(args: Sequence[str], stream: BinaryIO) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The arguments with `-` (or `KIND:-`) replaced by the path of a copy of standard input, and
    the display name of that copy ({path: "<stdin>"})."""
    wanted = [arg for arg in args if _is_stdin(arg)]
    if not wanted:
        yield list(args), {}
        return
    if len(wanted) > 1:
        raise InputError("`-` (standard input) can be given only once")
    from diagnose.evidence.tempdirs import private_tempdir, remove  # shutil, tempfile: only when `-` is given

    folder = private_tempdir("diagnose-stdin-")
    try:
        copy = folder / NAME
        cut = False
        with open(copy, "wb") as out:
            total = 0
            while chunk := stream.read(CHUNK):
                if total + len(chunk) > MAX_STDIN:
                    out.write(chunk[: MAX_STDIN - total])
                    cut = True
                    break
                out.write(chunk)
                total += len(chunk)
        if copy.stat().st_size == 0:
            raise InputError("-: standard input is empty, nothing to scan")
        if cut:
            import sys

            sys.stderr.write(f"diagnose: warning: standard input cut at its first {MAX_STDIN >> 30} GiB\n")
        yield [_replace(arg, str(copy)) for arg in args], {str(copy): DISPLAY}
    finally:
        remove(folder)
