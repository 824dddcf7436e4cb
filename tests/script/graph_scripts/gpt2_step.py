# One language-model step of a tiny GPT-2 (transformers, from a config: nothing downloaded); lm_head is tied to wte.
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.manual_seed(0)
config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                    eos_token_id=1)
model = GPT2LMHeadModel(config)
ids = torch.randint(0, 64, (2, 8))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
