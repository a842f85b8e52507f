import json
print("loading config", flush=True)
json.loads('{"lr": 0.001, "layers": 12,}')
