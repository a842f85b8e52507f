"""A training loop with a breakpoint left in: under nohup (stdin /dev/null) pdb reads EOF and
quits (bdb.BdbQuit); with stdin held open (tmux, a pipe) it waits at its prompt forever."""
import pdb

for step in range(3):
    print(f"step {step} loss {1.0 / (step + 1):.3f}", flush=True)
    if step == 2:
        pdb.set_trace()
        print("inspected", flush=True)
