import time
import traceback
from tqdm import tqdm


def read_record(i, attempt):
    if i % 4 == 1 and attempt == 0:
        raise OSError(5, "Input/output error", f"/data/shard-{i:05d}.bin")
    return i


total = 0
for step in tqdm(range(200), desc="train"):
    for attempt in range(3):
        try:
            total += read_record(step, attempt)
            break
        except OSError:
            traceback.print_exc()
            print(f"retrying step {step} (attempt {attempt + 1})", flush=True)
    time.sleep(0.01)
print(f"step 200 loss {1.0 / total:.4f}")
print("Training completed")
