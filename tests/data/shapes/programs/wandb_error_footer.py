"""A loop that logs its metrics to wandb, then logs an ERROR and ends the run as failed: wandb prints
its run history and summary (a "step 4" among them) after the run's own last line."""
import logging
import sys

import wandb

logging.basicConfig(format="%(asctime)s - %(name)s - %(levelname)s - %(message)s", level=logging.INFO)
log = logging.getLogger("finetune")
run = wandb.init(project="errfooter", dir="/tmp", config={"lr": 1e-4})
for step in range(5):
    wandb.log({"loss": 1.0 / (step + 1), "step": step, "lr": 1e-4, "grad_norm": 0.5, "tokens": 1000 * step,
               "epoch": 0.1 * step, "mem_gb": 10.0, "throughput": 123.0, "eval_loss": 0.9, "ppl": 2.5})
    log.info("step %d loss %.3f", step, 1.0 / (step + 1))
if len(sys.argv) > 1 and sys.argv[1] == "--finish":
    log.info("Training completed. Saved the final model to ./out")
    run.finish()
    sys.exit(0)
log.error("load failed: shard /data/shard-0007.parquet is truncated (expected 1048576 rows, got 0)")
run.finish(exit_code=1)
sys.exit(1)
