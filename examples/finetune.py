"""A small GPT-2 fine-tune step that goes wrong in three quiet ways (docs/inspect.md, "Real training code").

    gradflow inspect examples/finetune.py:main --only-problems

Built from a tiny config (transformers, nothing downloaded), with reentrant gradient checkpointing to save memory.
The first block is meant to stay fixed, but `torch.set_grad_enabled(False)` around it also cuts everything
before it; a gate scales the loss through `.item()`, so the gate never trains.
"""
import warnings

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

# torch does warn about the second mistake, once, among the rest of a training log (silenced for the docs)
warnings.filterwarnings("ignore", "None of the inputs have requires_grad")


def build():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                        eos_token_id=0, use_cache=False)
    model = GPT2LMHeadModel(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    return model.train(), torch.nn.Linear(32, 1)


def step(model, gate, ids):
    t = model.transformer
    h = t.wte(ids) + t.wpe(torch.arange(ids.shape[1]))
    with torch.set_grad_enabled(False):  # keep block 0 as it is
        h = t.h[0](h)
    h = t.ln_f(t.h[1](h))
    logits = model.lm_head(h)
    loss = F.cross_entropy(logits[0, :-1], ids[0, 1:])
    weight = torch.sigmoid(gate(h)).mean().item()
    return loss * weight


def main():
    model, gate = build()
    model.gate = gate  # one module, so that the report names the gate too
    return step(model, gate, torch.tensor([[5, 17, 3, 42, 8, 1, 29, 11]])), model
