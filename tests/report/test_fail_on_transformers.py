"""The gate, optimizer coverage and watch on a real GPT-2 (transformers, a tiny config, no weights downloaded).

Ground truth: plain `loss.backward()` on the same model (`p.grad is None`) and the optimizer's param_groups.
Importing transformers takes seconds: one module-scoped model, marked slow.
"""
import pytest
import torch

import gradflow
from gradflow.testing import assert_gradients_flow

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def make():
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)

    def build():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config)
    return build


IDS = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))


def loss_fn(model):
    return model(input_ids=IDS, labels=IDS).loss


def test_gate_and_optimizer_coverage_match_plain_torch(make):
    plain = make()
    loss_fn(plain).backward()
    got = {n for n, p in plain.named_parameters() if p.grad is not None}
    assert got == {n for n, _ in plain.named_parameters()}  # torch: every parameter gets gradient
    model = make()
    assert_gradients_flow(loss_fn, model)
    # an optimizer built with a filter that drops the final LayerNorm by mistake
    opt = torch.optim.AdamW([p for n, p in model.named_parameters() if not n.startswith("transformer.ln_f")])
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    untrained = {n for n, p in model.named_parameters() if n in got and id(p) not in held}
    assert untrained == {"transformer.ln_f.weight", "transformer.ln_f.bias"}
    with pytest.raises(AssertionError) as err:
        assert_gradients_flow(loss_fn, model, optimizer=opt, fail_on="untrained,orphan")
    assert {line.split()[0] for line in str(err.value).splitlines()[1:]} == untrained
    assert all(p.grad is None for p in model.parameters())  # .grad left alone


def test_watch_a_freeze_schedule_on_gpt2(make):
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    truth = []
    with gradflow.watch(model, optimizer=opt) as w:
        for step in range(3):
            model.transformer.h[0].requires_grad_(step > 0)
            loss_fn(model).backward()
            truth.append({n for n, p in model.named_parameters() if p.grad is not None})
            opt.step()
            opt.zero_grad()
    for step, got in enumerate(truth):
        assert {p.name for p in w.params if p.status_at(step) == "live"} == got
    assert {p.name for p in w.changed} == {n for n, _ in model.transformer.h[0].named_parameters(
        prefix="transformer.h.0")}
    tied = w.param("lm_head.weight")  # tied to the token embedding: one tensor, both names
    assert tied.name == "transformer.wte.weight" and tied.aliases == ["lm_head.weight"]
