"""A tiny 12-layer GPT-2 (transformers, built from a config: nothing is downloaded) and its language-model loss.

    gradflow inspect examples/gpt2_layers.py:main --graph svg --autograd -o gpt2.svg

draws the autograd graph torch records for it: 12 blocks of the same ops folded into one (`h.0–h.11 ×12`), the
embedding tied to the output layer drawn once.
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 16))
    return model(input_ids=ids, labels=ids).loss, model
