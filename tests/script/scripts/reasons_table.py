# Every reason inspect gives, in one script: each marked line is the one the table must name.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
head = torch.nn.Linear(2, 1)
model.weight.requires_grad_(False)  # frozen: model.weight
head.bias.requires_grad = False  # frozen: head.bias
x = torch.randn(4, 3)


@torch.no_grad()
def ema(t):
    return t * 0.9  # cut: smooth


def logged(t):
    with torch.no_grad():
        return t.norm()  # cut: norm


h = model(x)
smooth = ema(h)
norm = logged(h)
idx = h.argmax(1)  # cut: idx
scale = h.sum().item()  # cut: s
s = torch.tensor(scale)
d = h.data  # cut: d
spare = torch.ones(2, requires_grad=True)
unused = (spare * 2).detach()  # cut: unused spare
loss = head(h).sum() + (smooth * s).sum() + d.sum() + unused.sum() + norm
loss.backward()
