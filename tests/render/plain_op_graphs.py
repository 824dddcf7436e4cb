"""Models for the autograd-graph tests and their truth, in plain torch: no gradflow here.

`walk(loss)` finds torch's own graph from `loss.grad_fn` through `next_functions`, as torch documents it;
the tests compare gradflow's drawing with it. Not collected by pytest (no test_ prefix).
"""
from collections import Counter

import torch


class Net(torch.nn.Module):
    """enc (frozen) -> relu -> mid -> (z + 2*z.detach()) -> head: one cut, two frozen parameters."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Linear(4, 8)
        self.mid = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 1)
        self.enc.requires_grad_(False)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        z = self.mid(h)
        side = z.detach() * 2
        out = self.head(z + side)
        return out


def net_loss(net):
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    return (net(x) ** 2).mean()


def gpt2(layers: int = 12):
    """A tiny GPT-2 from a config (nothing downloaded); its lm_head is tied to wte."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                        eos_token_id=1)
    return GPT2LMHeadModel(config)


def gpt2_loss(model):
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    return model(input_ids=ids, labels=ids).loss


def walk(loss) -> tuple[list, list[tuple]]:
    """Every node reachable from loss.grad_fn, and each (input node, consumer node) pair."""
    seen, todo, edges = {loss.grad_fn}, [loss.grad_fn], []
    while todo:
        node = todo.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None:
                edges.append((nxt, node))
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    return list(seen), edges


def kinds(nodes) -> Counter:
    return Counter(type(n).__name__ for n in nodes)


def edge_kinds(edges) -> Counter:
    return Counter((type(a).__name__, type(b).__name__) for a, b in set(edges))


def leaves_reached(model, loss) -> set[str]:
    """Names of the parameters torch's graph reaches (the first name of a tied one)."""
    nodes, _ = walk(loss)
    reached = {id(n.variable) for n in nodes if type(n).__name__ == "AccumulateGrad"}
    names = {}
    for name, p in model.named_parameters():  # remove_duplicate: a tied weight under its first name
        names.setdefault(id(p), name)
    return {names[i] for i in reached if i in names}


def cut_consumers(loss) -> list[tuple[str, list[str]]]:
    """Nodes with an input that has no node (None in next_functions): their type, and their other inputs' types."""
    nodes, _ = walk(loss)
    return sorted((type(n).__name__, sorted(type(f).__name__ for f, _ in n.next_functions if f is not None))
                  for n in nodes if any(f is None for f, _ in n.next_functions))
