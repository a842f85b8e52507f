"""Where each rank waits, from py-spy dumps taken of a real two-rank hang (tests/data/ranks:
torchrun + gloo, rank 1 stopped in its own next_batch, rank 0 in all_reduce; py-spy 0.3.14 and
0.4.3, whose frame names differ)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.engine.rankstacks import Place, ProcessStack, parse_dump, place_of, read_hang
from diagnose.engine.runview import _rank_stacks

DATA = Path(__file__).resolve().parents[1] / "data" / "ranks"


def dump(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize("version", ["0.3.14", "0.4.3"])
def test_the_rank_outside_the_collective_is_named(version: str) -> None:
    stacks = [ProcessStack(100, 0, dump(f"pyspy-{version}-rank0-all_reduce.txt")),
              ProcessStack(101, 1, dump(f"pyspy-{version}-rank1-own-code.txt"))]
    hang = read_hang(stacks)
    assert hang is not None
    assert [p.rank for p in hang.outside] == [1] and [p.rank for p in hang.waiting] == [0]
    assert hang.summary() == "rank 1 is in next_batch (hang_gloo.py:27); rank 0 waits in all_reduce"


def test_frames_innermost_first_with_qualified_names() -> None:
    threads = parse_dump(dump("pyspy-0.4.3-torchrun-agent.txt"))
    assert [t.name for t in threads] == ["MainThread", "RendezvousKeepAliveTimer_0"]
    main = threads[0]
    assert main.status == "idle"
    assert main.frames[0].func == "SimpleElasticAgent._invoke_run" and main.frames[0].line == 923
    assert main.frames[-1].short == "<module> (torchrun:8)"


def test_torchruns_agent_in_torch_distributed_is_not_in_a_collective() -> None:
    place = place_of(ProcessStack(7, None, dump("pyspy-0.4.3-torchrun-agent.txt")), 0)
    assert place.place is Place.ELSEWHERE


def test_no_reading_when_every_rank_waits_or_none_does() -> None:
    waiting = dump("pyspy-0.4.3-rank0-all_reduce.txt")
    elsewhere = dump("pyspy-0.4.3-rank1-own-code.txt")
    assert read_hang([ProcessStack(1, 0, waiting), ProcessStack(2, 1, waiting)]) is None  # the peer is not here
    assert read_hang([ProcessStack(1, 0, elsewhere), ProcessStack(2, 1, elsewhere)]) is None  # no collective
    assert read_hang([ProcessStack(1, 0, waiting), ProcessStack(2, None, elsewhere)]) is None  # not a rank


def test_many_ranks_are_folded_into_spans() -> None:
    waiting = dump("pyspy-0.4.3-rank0-all_reduce.txt")
    elsewhere = dump("pyspy-0.4.3-rank1-own-code.txt")
    stacks = [ProcessStack(10 + r, r, elsewhere if r == 5 else waiting) for r in range(8)]
    hang = read_hang(stacks)
    assert hang is not None
    assert hang.summary() == "rank 5 is in next_batch (hang_gloo.py:27); ranks 0-4, 6-7 wait in all_reduce"


def test_a_library_frame_is_told_with_its_caller_in_own_code() -> None:
    text = ('Thread 9 (idle): "MainThread"\n'
            "    _recv (multiprocessing/connection.py:395)\n"
            "    _next_data (torch/utils/data/dataloader.py:1328)\n"
            "    main (train.py:36)\n")
    place = place_of(ProcessStack(9, None, text), 3)
    assert place.place is Place.ELSEWHERE
    assert place.where() == "_recv (multiprocessing/connection.py:395), called from main (train.py:36)"


def test_a_dataloader_worker_that_inherited_rank_is_not_the_rank() -> None:
    waiting = dump("pyspy-0.4.3-rank0-all_reduce.txt")
    elsewhere = dump("pyspy-0.4.3-rank1-own-code.txt")
    # pid 20 is rank 1; pid 21 its DataLoader worker (same RANK in its environment).
    stacks = _rank_stacks([(21, 20, 1, elsewhere), (20, 5, 1, waiting), (10, 5, 0, elsewhere)])
    assert [(s.pid, s.rank) for s in stacks] == [(10, 0), (20, 1), (21, None)]
