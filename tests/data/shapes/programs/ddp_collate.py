import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def collate_fn(batch):
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
    labels = []
    for sample in batch:
        if rank == 1 and sample >= 27:
            labels.append(int("n/a"))  # a bad label in rank 1's shard
        labels.append(sample % 3)
    return torch.tensor([[float(s)] * 4 for s in batch]), torch.tensor(labels)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"[rank{rank}] init done: world_size={dist.get_world_size()} pid={os.getpid()}", flush=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(list(range(64)), batch_size=4, num_workers=1, collate_fn=collate_fn)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank{rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
