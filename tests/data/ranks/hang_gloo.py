"""A tiny data-parallel loop over torch.distributed (gloo, CPU), started by torchrun (RANK,
WORLD_SIZE, MASTER_ADDR/PORT from its environment). At HANG_STEP, rank HANG_RANK stops in its
own code (a data loader that never returns, here a sleep) while the other ranks go on into
the step's all_reduce and wait there: a hang before any timeout (the process group's timeout
is PG_TIMEOUT, 30 minutes by default). Every line goes to stderr through logging, with its time.
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
hang_rank = int(os.environ.get("HANG_RANK", "1"))
hang_step = int(os.environ.get("HANG_STEP", "5"))
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=f"%(asctime)s [rank{rank}] %(message)s")
log = logging.getLogger("train")


def next_batch(step: int) -> torch.Tensor:
    if rank == hang_rank and step == hang_step:
        time.sleep(3600)  # a reader blocked on a file system or a queue that never fills
    return torch.full((1000,), float(rank + 1))


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT", "1800"))))
    log.info("rank %d of %d started, pid %d", rank, world, os.getpid())
    weights = torch.zeros(1000)
    for step in range(1000):
        grad = next_batch(step)
        dist.all_reduce(grad)
        weights -= 0.01 * grad / world
        log.info("step %d loss %.4f", step, float(weights.abs().mean()))
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
