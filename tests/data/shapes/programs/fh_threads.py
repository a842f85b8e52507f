import ctypes, threading, time

def loader():
    while True:
        time.sleep(0.01)

for i in range(2):
    threading.Thread(target=loader, name=f"loader-{i}", daemon=True).start()
for step in range(10):
    print(f"step {step} loss {1.0 / (step + 1):.4f}", flush=True)
    if step == 3:
        ctypes.string_at(0)
