#!/usr/bin/env python3
"""A small healthy DDP run on CPU (gloo) that prints, on every step and every rank, the step
line most training loops print: loss, gradient norm, throughput. Used once to capture the real
output of bench/data/ddp-gradnorm-cpu.log (see bench/data/README.md); run under torchrun."""
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    steps = int(os.environ.get("STEPS", "2000"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print(f"rank {rank} of {world}, torch {torch.__version__}", flush=True)
    tokens = 32 * 64
    for step in range(steps):
        started = time.perf_counter()
        x = torch.randn(32, 64)
        y = torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        took = time.perf_counter() - started
        print(f"step {step} loss {loss.item():.4f} grad_norm {grad_norm.item():.3f} tokens/s {tokens / took:.0f}",
              flush=True)
    print("training finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
