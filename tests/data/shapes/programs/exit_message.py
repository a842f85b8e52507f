"""A training script that gives up with sys.exit(message): Python prints only the message."""
import sys

batches = []
for epoch in range(2):
    print(f"epoch {epoch} loss 0.5{epoch}", flush=True)
if not batches:
    sys.exit("Training aborted: the dataloader produced no batches (check --data-dir)")
