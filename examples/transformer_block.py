"""A small language-model block: tied embedding, one transformer encoder layer, a head.

    gradflow inspect examples/transformer_block.py:main
With the default sizes it has about 5.2 million parameters (bench/inspect_speed.py times it).
"""
import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 4000, d: int = 512, heads: int = 8, ff: int = 2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.block = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied input/output embedding

    def forward(self, tokens):
        return self.head(self.norm(self.block(self.embed(tokens))))


def lm_loss(model: TinyLM, tokens):
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def main(vocab: int = 4000, d: int = 512, batch: int = 8, length: int = 65):
    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads=8, ff=4 * d)
    tokens = torch.randint(0, vocab, (batch, length))
    return lm_loss(model, tokens), model
