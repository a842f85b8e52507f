import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} step 1 loss 2.31", flush=True)
    if rank == 1:
        raise RuntimeError("checkpoint shard 1 has shape torch.Size([4, 4]), expected torch.Size([8, 4])")
    time.sleep(2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
