"""A loop that catches the exception, logs its repr, and exits 1."""
import logging
import sys

logging.basicConfig(format="%(asctime)s %(name)s %(message)s", level=logging.INFO)
log = logging.getLogger("trainer")
for step in range(3):
    log.info("step %d loss %.3f", step, 1.0 / (step + 1))
try:
    scale = 1 / 0
except Exception as exc:
    log.info("Exception in training loop: %r", exc)
    sys.exit(1)
