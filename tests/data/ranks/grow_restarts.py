import os, sys, time
rank = int(os.environ["RANK"])
print(f"rank {rank} attempt {os.environ.get('TORCHELASTIC_RESTART_COUNT')} pid {os.getpid()} loading shards", flush=True)
blocks = []
for step in range(1000):
    if rank == 1:
        blocks.append(b"\x01" * (16 << 20))
    print(f"rank {rank} step {step}", flush=True) if step % 10 == 0 else None
    time.sleep(0.02)
