"""Views made under no_grad and then written in place: torch then refuses to say their grad_fn or is_leaf (it
raises), yet the script may go on using them under no_grad. nn.Embedding's padding row is one (LLaMA's embedding
with a pad_token_id), made while the model is built. gradflow script must run this as python does."""
import torch

torch.manual_seed(0)
emb = torch.nn.Embedding(6, 3, padding_idx=0)  # zeroes its padding row through a view made under no_grad
w = torch.randn(4, 3, requires_grad=True)
with torch.no_grad():
    row = w[0]  # a view made under no_grad ...
    row.fill_(0.5)  # ... written in place: from here torch will not say what it is
    row.mul_(2)  # another write, still allowed under no_grad
ids = torch.tensor([0, 2, 5])
loss = (emb(ids) @ w.t()).sum()
loss.backward()
