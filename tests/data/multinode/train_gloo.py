"""A tiny data-parallel loop over torch.distributed (gloo, CPU), one process per rank.

RANK, WORLD_SIZE, MASTER_PORT come from the environment; FAIL_RANK raises a ValueError at
FAIL_STEP (a bad batch), the other ranks then fail inside their all_reduce. Every line goes to
stderr through logging, with its time, as a training script's log would.
"""

import datetime
import logging
import os
import sys
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
fail_step = int(os.environ.get("FAIL_STEP", "5"))
steps = int(os.environ.get("STEPS", "20"))
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("train")


def main() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "30"))))
    log.info("rank %d of %d started on %s, pid %d", rank, world, os.environ.get("NODE", "?"), os.getpid())
    weights = torch.zeros(1000)
    for step in range(steps):
        grad = torch.full((1000,), float(rank + 1))
        if rank == fail_rank and step == fail_step:
            log.info("step %d: loading batch", step)
            raise ValueError(f"bad batch at step {step}: expected 1000 features, got 999")
        dist.all_reduce(grad)
        weights -= 0.01 * grad / world
        log.info("step %d loss %.4f", step, float(weights.abs().mean()))
        time.sleep(0.2)
    dist.destroy_process_group()
    log.info("training finished")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log.exception("rank %d failed", rank)
        raise
