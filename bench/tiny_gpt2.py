"""A tiny GPT-2 (transformers, built from a config: nothing is downloaded) and one training step.

    python bench/tiny_gpt2.py                        # plainly: build, forward, loss.backward()
    gradflow inspect bench/tiny_gpt2.py:main         # the same under gradflow
bench/inspect_speed.py runs both in fresh processes and prints the ratio.
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def build():
    """The model and a batch of token ids (bench/inspect_speed.py also times its step in process)."""
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    return GPT2LMHeadModel(config), torch.randint(0, 100, (4, 32))


def main():
    model, ids = build()
    return model(input_ids=ids, labels=ids).loss, model


if __name__ == "__main__":
    loss, model = main()
    loss.backward()
    print(f"loss {loss.item():.6f}; {sum(p.grad is not None for p in model.parameters())} parameters got a gradient")
