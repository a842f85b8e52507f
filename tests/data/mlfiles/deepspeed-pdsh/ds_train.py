# Each rank joins a gloo group, steps twice; rank 1 then raises (a bad shard).
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(2):
    t = torch.ones(2); dist.all_reduce(t)
    print(f"[rank{rank}] step {step} ok", flush=True)
if rank == 1:
    raise RuntimeError("shard 17 of the dataset is corrupt: unexpected end of file")
dist.barrier()
