import torch

print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), flush=True)
x = torch.randn(1024, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        y = x * 2
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
for step in range(3):
    print(f"step {step} loss {float((x * x).mean()):.4f}", flush=True)
with torch.cuda.graph(graph):
    y = x * 2
    total = y.sum().item()
print("captured", total)
