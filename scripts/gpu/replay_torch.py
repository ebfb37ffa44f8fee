"""A training run for `cuguard replay` against PyTorch's own figures (issue 57 item 1, issue 53
item 4): resnet18 (torchvision) or a GPT-2-like transformer (torch.nn only), trained a few
steps with AdamW on one device, then PyTorch's own answers printed as one JSON line:
max_memory_reserved (what `cuguard replay --allocator torch` must give within 2%),
max_memory_allocated, and the device's total.

    python3 replay_torch.py resnet18|gpt2 [STEPS]
"""
import json
import sys

import torch
from torch import nn

which = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.manual_seed(0)
dev = "cuda"
if which == "resnet18":
    import torchvision

    model = torchvision.models.resnet18(num_classes=1000).to(dev)
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    def loss():
        return loss_fn(model(x), y)

    params = model.parameters()
else:
    vocab, d, layers, heads, seq, batch = 50257, 768, 6, 12, 512, 8

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(d, vocab, bias=False)
            self.mask = nn.Transformer.generate_square_subsequent_mask(seq)

        def forward(self, ids):
            h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            h = self.blocks(h, mask=self.mask.to(ids.device), is_causal=True)
            return self.head(h)

    model = GPT().to(dev)
    ids = torch.randint(0, vocab, (batch, seq), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    def loss():
        logits = model(ids[:, :-1])
        return loss_fn(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))

    params = model.parameters()
opt = torch.optim.AdamW(params, lr=1e-4)
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    l = loss()
    l.backward()
    opt.step()
torch.cuda.synchronize()
print(json.dumps({
    "model": which,
    "steps": steps,
    "loss": float(l),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "memory_reserved": torch.cuda.memory_reserved(),
    "total": torch.cuda.get_device_properties(0).total_memory,
}))
