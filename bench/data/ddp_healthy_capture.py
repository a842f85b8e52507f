#!/usr/bin/env python3
"""A small healthy DDP training run on GPUs, used once to capture a real training log whose
shapes (tqdm bars, rank-prefixed timestamped loss lines, warnings, NCCL INFO lines) the
benchmark generator repeats. Run under torchrun (see bench/data/README.md)."""
import logging
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
log = logging.getLogger("train")


def main() -> None:
    steps = int(os.environ.get("STEPS", "400"))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    log.info("rank %d of %d on %s, torch %s", rank, world, torch.cuda.get_device_name(local), torch.__version__)
    torch.manual_seed(rank)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    scaler = torch.cuda.amp.GradScaler()  # deprecated spelling: prints a real FutureWarning
    sched.step()  # before opt.step(): prints torch's real lr_scheduler UserWarning
    it = range(steps)
    if rank == 0:
        from tqdm import tqdm

        it = tqdm(it, desc="train", mininterval=0.05)
    for step in it:
        x = torch.randn(64, 256, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        if step % 10 == 0:
            log.info("epoch %d step %d loss %.4f lr %.2e", step // 100 + 1, step, loss.item(), sched.get_last_lr()[0])
        time.sleep(0.01)
    log.info("training finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
