"""`inspect` on a FUNCTION that returns what a Hugging Face model returns (a ModelOutput with .loss)."""
import json
import textwrap

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

transformers = pytest.importorskip("transformers")

USER = """
import torch
import transformers

def model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8,
                                     bos_token_id=0, eos_token_id=0)
    m = transformers.GPT2LMHeadModel(config)
    m.transformer.wpe.weight.requires_grad_(False)  # a frozen parameter, to see a verdict other than live
    return m

def main():
    m = model()
    batch = {"input_ids": torch.arange(8).reshape(1, 8) % 32}
    return m(**batch, labels=batch["input_ids"])  # what Hugging Face users write: a ModelOutput

def no_labels():
    m = model()
    return m(input_ids=torch.arange(8).reshape(1, 8) % 32)
"""

PLAIN = """
import torch, transformers
torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=8, bos_token_id=0,
                                 eos_token_id=0)
m = transformers.GPT2LMHeadModel(config)
m.transformer.wpe.weight.requires_grad_(False)
ids = torch.arange(8).reshape(1, 8) % 32
out = m(input_ids=ids, labels=ids)
out.loss.backward()
"""


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    (tmp_path / "user.py").write_text(textwrap.dedent(USER))
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow  # a real transformers model: its import and first forward take seconds
def test_a_model_output_is_read_by_its_loss(user_file):
    res = CliRunner().invoke(app, ["inspect", "user.py:main", "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    env: dict = {}
    exec(PLAIN, env)  # plain torch and transformers, written separately: the truth
    assert doc["loss"] == pytest.approx(env["out"].loss.item())
    got = {p["name"]: not p["grad_is_none"] for p in doc["params"]}
    want = {name: p.grad is not None for name, p in env["m"].named_parameters()}
    assert got == want and not got["transformer.wpe.weight"]


def test_a_model_output_without_a_loss_says_to_give_labels(user_file):
    res = CliRunner().invoke(app, ["inspect", "user.py:no_labels"])
    assert res.exit_code == 2
    assert "whose .loss is None" in res.stderr and "labels" in res.stderr
