# Tiny GPT-2 (random init, no download) trained by the HF Trainer on random tokens; writes trainer_state.json.
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
lr = float(sys.argv[2]); out = sys.argv[1]
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
class Data(torch.utils.data.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 64, (16,), generator=g)
        return {"input_ids": ids, "labels": ids}
args = TrainingArguments(output_dir=out, max_steps=12, per_device_train_batch_size=8, learning_rate=lr,
                         logging_steps=1, save_steps=12, report_to=[], optim="sgd",
                         logging_nan_inf_filter=False, use_cpu=True, max_grad_norm=0.0 if lr > 1 else 1.0)
Trainer(model=model, args=args, train_dataset=Data()).train()
