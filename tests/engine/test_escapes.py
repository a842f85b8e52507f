"""The vector escape stripper (engine/escapes.py) gives the same bytes as the regex it stands in
for, on every real log of the repository and on made-up edge cases that real logs may hold."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.engine import bytecount
from diagnose.engine.escapes import _strip_numpy, strip_escapes
from diagnose.evidence.lines import ANSI_BYTES

ROOT = Path(__file__).resolve().parents[2]
np = pytest.importorskip("numpy", reason="numpy is not installed: the regex strips alone")


@pytest.fixture(autouse=True)
def numpy_counts() -> Iterator[None]:
    bytecount.reset()
    bytecount.prepare(bytecount.NUMPY_WORTH)
    assert bytecount.using_numpy()
    yield
    bytecount.reset()


def _real_texts() -> Iterator[tuple[str, bytes]]:
    for folder in ("bench/data", "corpus/cases", "fixtures", "tests/data"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix in (".yaml", ".py", ".md", ".json", ".toml"):
                continue
            data = path.read_bytes()
            if path.suffix == ".gz":
                try:
                    data = gzip.decompress(data)
                except OSError:
                    continue
            if b"\x1b" in data:
                yield str(path.relative_to(ROOT)), data


def test_real_logs_with_escapes_are_stripped_as_the_regex_strips_them() -> None:
    seen = settled = 0
    for name, data in _real_texts():
        # Whole, and cut at odd places (a sequence split by a piece's end).
        for piece in (data, data[: len(data) // 2 + 1], data[3:]):
            expected = ANSI_BYTES.sub(b"", piece)
            assert strip_escapes(memoryview(piece)) == expected, name
            found = _strip_numpy(np, memoryview(piece))  # the vector path, whatever the size
            assert found is None or found == expected, name
            settled += found is not None
        seen += 1
    assert settled >= seen
    # All of them in one piece: several 1 MiB blocks, cut at newlines.
    joined = b"".join(data for _name, data in _real_texts())
    assert len(joined) > 3 * 2**20
    assert strip_escapes(memoryview(joined)) == ANSI_BYTES.sub(b"", joined)
    assert strip_escapes(memoryview(joined), vector=False) == ANSI_BYTES.sub(b"", joined)
    assert seen >= 5  # rich progress bars, coloured DeepSpeed warnings, Lightning, tqdm


def test_the_vector_path_settles_the_common_sequences() -> None:
    # The real shapes (colours, cursor moves, 2-byte escapes) never need the regex; an OSC does.
    common = b"\r\x1b[93m [WARNING] \x1b[0m async_io\x1b[2K\x1b[1A\x1b(B\x1bMx\n" * 2000
    assert _strip_numpy(np, memoryview(common)) == ANSI_BYTES.sub(b"", common)
    osc = b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\n" * 20000
    assert _strip_numpy(np, memoryview(osc)) is None
    assert strip_escapes(memoryview(osc)) == ANSI_BYTES.sub(b"", osc)


_ALPHABET = st.sampled_from([b"\x1b", b"[", b"]", b"0", b"9", b";", b"?", b" ", b"/", b"m", b"K", b"@", b"~",
                             b"\\", b"Z", b"_", b"\x07", b"\r", b"\n", b"a", b"\x1b[", b"\x1b[0m", b"\xff"])


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=400))
def test_any_mix_of_escape_bytes_strips_as_the_regex_does(parts: list[bytes]) -> None:
    data = b"".join(parts)
    found = _strip_numpy(np, memoryview(data))
    assert found is None or found == ANSI_BYTES.sub(b"", data)
    assert strip_escapes(memoryview(data)) == ANSI_BYTES.sub(b"", data)
