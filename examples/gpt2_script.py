# One training step of a tiny 12-layer GPT-2 (transformers, built from a config: nothing is downloaded), its
# position embedding frozen.
#   python examples/gpt2_script.py
#   gradflow script examples/gpt2_script.py --autograd -o gpt2.svg
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=12, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                    eos_token_id=0)
model = GPT2LMHeadModel(config)
model.transformer.wpe.requires_grad_(False)  # keep the learned positions as they are
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
ids = torch.randint(0, 100, (2, 16))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
opt.step()
print(f"loss {loss.item():.4f}")
