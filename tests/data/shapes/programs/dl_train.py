import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __init__(self):
        self.rows = [{"x": [float(i)] * 4, "y": i % 3} for i in range(64)]
        self.rows[37] = {"x": [0.0] * 4}  # a bad sample: no label

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return torch.tensor(row["x"]), row["y"]


def collate_fn(batch):
    xs, ys = zip(*batch)
    return torch.stack(xs), torch.tensor(ys)


def main():
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Samples(), batch_size=8, num_workers=2, collate_fn=collate_fn)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
