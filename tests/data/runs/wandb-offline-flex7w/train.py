import time

import wandb

run = wandb.init(project="diagnose-capture", mode="offline", id="flex7w")
for step in range(3):
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} INFO step {step} loss {2.3 - step * 0.1:.2f}", flush=True)
    run.log({"loss": 2.3 - step * 0.1})
raise ValueError(f"step {step}: loss is nan")
