# wandb in offline mode: a loss that becomes inf then NaN, logged per step; wandb writes
# wandb/offline-run-*/files/wandb-summary.json and logs/debug-internal.log.
import math, wandb
run = wandb.init(project="tiny", mode="offline", config={"lr": 10.0})
loss = 2.5
for step in range(8):
    wandb.log({"train/loss": loss, "step": step})
    loss = loss * 1e120 if loss < 1e200 else float("nan")
run.finish()
