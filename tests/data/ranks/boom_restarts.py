import os, time, sys
rank = int(os.environ["RANK"])
print(f"rank {rank} attempt {os.environ.get('TORCHELASTIC_RESTART_COUNT')} pid {os.getpid()}", flush=True)
time.sleep(1)
if rank == 1:
    raise ValueError("bad batch at step 5: expected 1000 features, got 999")
time.sleep(5)
