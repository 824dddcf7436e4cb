"""gradflow in a test suite: fail when gradient stops reaching a parameter (pytest examples/test_gradients.py)."""
import pytest
import torch
from torch import nn

from gradflow.testing import assert_gradients_flow


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.block = nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, vocab)
        self.detach_block = False

    def forward(self, ids):
        h = self.block(self.embed(ids))
        return self.head(h.detach() if self.detach_block else h)


def lm_loss(model):
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 9))
    logits = model(ids[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, 50), ids[:, 1:].reshape(-1))


def test_gradient_reaches_every_parameter():
    assert_gradients_flow(lm_loss, TinyLM())  # fails naming each parameter cut off, with its reason and line


def test_frozen_embeddings_are_intended():
    model = TinyLM()
    model.embed.requires_grad_(False)
    assert_gradients_flow(lm_loss, model, fail_on="default,frozen", allow=["embed.*"])


def test_the_optimizer_trains_what_gets_gradient():
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    assert_gradients_flow(lm_loss, model, optimizer=optimizer, fail_on="default,untrained,orphan")


def test_a_detach_is_caught():
    model = TinyLM()
    model.detach_block = True
    with pytest.raises(AssertionError, match=r"block\.linear1\.weight +cut: cut by `detach\(\)`"):
        assert_gradients_flow(lm_loss, model)
