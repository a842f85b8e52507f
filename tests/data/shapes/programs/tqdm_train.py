import time
from tqdm import tqdm


def read_record(i):
    if i == 7:
        raise OSError(5, "Input/output error", f"/data/shard-{i:05d}.bin")
    return i


total = 0
for i in tqdm(range(20), desc="train"):
    total += read_record(i)
    time.sleep(0.02)
