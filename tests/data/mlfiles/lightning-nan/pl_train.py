# Tiny Lightning run on random data with the CSVLogger; SGD lr from argv (a huge one diverges to NaN).
import sys, torch, lightning as L
from lightning.pytorch.loggers import CSVLogger
lr = float(sys.argv[2])
class M(L.LightningModule):
    def __init__(self, lr):
        super().__init__(); self.save_hyperparameters(); self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, i):
        x, y = batch; loss = torch.nn.functional.mse_loss(self.net(x), y); self.log("train_loss", loss); return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
torch.manual_seed(0)
x = torch.randn(64, 8); y = x.sum(1, keepdim=True) * 3
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
L.Trainer(max_epochs=2, logger=CSVLogger(sys.argv[1], name="tiny"), log_every_n_steps=1, enable_checkpointing=False,
          accelerator="cpu", enable_progress_bar=False).fit(M(lr), dl)
