# Two gloo ranks with the flight recorder on; rank 1 skips the 4th all_reduce (a desync: rank 0
# waits on a collective rank 1 never joins). Each rank then dumps its flight-recorder buffer with
# torch's own dumper (_dump_fr_trace, the pickle TORCH_NCCL_DEBUG_INFO_TEMP_FILE names for NCCL).
import os, sys, time, torch, torch.distributed as dist
import torch.multiprocessing as mp
import torch._C._distributed_c10d as c10d
def work(rank, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29612")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
    pending = dist.all_reduce(t, async_op=True) if rank == 0 else None
    time.sleep(1)
    with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as f:
        f.write(c10d._dump_fr_trace())
    os._exit(0)
if __name__ == "__main__":
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    mp.spawn(work, args=(sys.argv[1],), nprocs=2)
