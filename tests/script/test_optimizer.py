"""`gradflow script`'s optimizer findings against what the optimizer really did to the weights.

Each script is run plainly first (runpy; the file imports torch only) and keeps its own truth: a copy of every
parameter before and after each `step()`, which of them moved without a gradient to follow, and whether each
.grad still held an earlier step's gradient when backward() added to it. gradflow's findings must name exactly
those parameters.
"""
import json
import runpy
import textwrap

import pytest

HARNESS = """
import torch
from torch import nn
torch.manual_seed(0)
truth = {{"moved": set(), "stale": set(), "changed": set()}}
used = set()

def named():
    return dict(model.named_parameters(prefix="model"))

def checked_step(opt):
    before = {{n: p.detach().clone() for n, p in named().items()}}
    no_grad = {{n for n, p in named().items() if p.grad is not None and (not p.requires_grad or not p.grad.any())}}
    stale = {{n for n in used if named()[n].grad is not None and n in dirty}}
    truth["stale"] |= {{n for n in stale if any(named()[n] is q for g in opt.param_groups for q in g["params"])}}
    opt.step()
    for n, p in named().items():
        if not torch.equal(before[n], p.detach()):
            truth["changed"].add(n)
            if n in no_grad:
                truth["moved"].add(n)
    used.update(n for n, p in named().items() if p.grad is not None)
    dirty.clear()

dirty = set()
def checked_backward(loss):  # (no tensor left in a local: gradflow names a tensor after its innermost name)
    used.difference_update({{n for n, q in named().items() if q.grad is None or not q.grad.any()}})
    dirty.update(n for n in used if named()[n].requires_grad)
    loss.backward()

model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
{body}
"""

FREEZE_BODY = """
opt = torch.optim.{optimizer}
for step in range(12):
    if step == 5:
        model[0].requires_grad_(False)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt.zero_grad(set_to_none=False)  # a frozen parameter keeps a .grad of zeros
    checked_backward(((model(x) - y) ** 2).mean())
    checked_step(opt)
"""

NEVER_ZEROED_BODY = """
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    checked_backward(((model(x) - y) ** 2).mean())  # zero_grad() is never called
    checked_step(opt)
"""

ACCUMULATION_BODY = """
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    for micro in range(3):  # three backward() calls add up before each step: on purpose
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        checked_backward(((model(x) - y) ** 2).mean() / 3)
    checked_step(opt)
    opt.zero_grad()
"""

UNHELD_BODY = """
opt = torch.optim.SGD(model[0].parameters(), lr=0.05, momentum=0.9)  # model[2] left out
for step in range(6):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    {zero}
    checked_backward(((model(x) - y) ** 2).mean())
    checked_step(opt)
"""


def run_both(tmp_path, cli, body: str):
    path = tmp_path / "train.py"
    path.write_text(HARNESS.format(body=textwrap.dedent(body)))
    truth = runpy.run_path(str(path), run_name="__main__")["truth"]
    res = cli("script", str(path), "--json", "--brief")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.stdout.splitlines()]
    findings = records[-1]["summary"]["findings"]
    assert [f for r in records[:-1] for f in r["findings"]] == findings  # each said once, as it was found
    return truth, {(f["kind"], f["name"]) for f in findings}, findings


@pytest.mark.parametrize("optimizer, moves", [
    ("SGD(model.parameters(), lr=0.1, momentum=0.9)", True),
    ("SGD(model.parameters(), lr=0.1, weight_decay=0.01)", True),
    ("AdamW(model.parameters(), lr=0.01)", True),  # its moments (and its default weight decay)
    ("SGD(model.parameters(), lr=0.1)", False),  # a .grad of zeros and nothing else: it stays
])
def test_a_frozen_parameter_moved_by_the_optimizer_is_named_exactly_when_it_moved(tmp_path, cli, optimizer, moves):
    truth, found, findings = run_both(tmp_path, cli, FREEZE_BODY.format(optimizer=optimizer))
    assert truth["moved"] == ({"model.0.weight", "model.0.bias"} if moves else set())
    assert found == {("moved", n) for n in truth["moved"]}
    for f in findings:
        assert f["message"].startswith(f"{f['name']} has requires_grad=False, but it is still updated by "
                                       f"{optimizer.split('(')[0]}(")
        assert "/train.py:" in f["message"] and "set its .grad = None or leave it out of the optimizer" in f["message"]
        assert f["call"] >= 6  # frozen before the sixth backward()


def test_momentum_names_its_setting(tmp_path, cli):
    _, _, findings = run_both(tmp_path, cli, FREEZE_BODY.format(optimizer="SGD(model.parameters(), lr=0.1, "
                                                                          "momentum=0.9)"))
    assert "SGD(momentum=0.9) at " in findings[0]["message"] and ", through its momentum: " in findings[0]["message"]


def test_zero_grad_never_called_is_named_for_every_parameter(tmp_path, cli):
    truth, found, _ = run_both(tmp_path, cli, NEVER_ZEROED_BODY)
    assert truth["stale"] == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}
    assert found == {("never_zeroed", n) for n in truth["stale"]}


def test_accumulating_on_purpose_before_each_step_is_not_a_finding(tmp_path, cli):
    truth, found, _ = run_both(tmp_path, cli, ACCUMULATION_BODY)
    assert truth["stale"] == set() and found == set()


@pytest.mark.parametrize("zero, accumulates", [("opt.zero_grad()", True), ("model.zero_grad()", False)])
def test_a_parameter_no_optimizer_holds(tmp_path, cli, zero, accumulates):
    truth, found, _ = run_both(tmp_path, cli, UNHELD_BODY.format(zero=zero))
    left_out = {"model.2.weight", "model.2.bias"}
    assert truth["changed"] == {"model.0.weight", "model.0.bias"}  # the left-out layer never changed
    want = {("unheld", n) for n in left_out}
    if accumulates:  # opt.zero_grad() clears only what opt holds
        want |= {("unheld_accumulates", n) for n in left_out}
    assert found == want


def test_the_text_summary_lists_the_optimizer_and_its_findings(tmp_path, cli):
    path = tmp_path / "train.py"
    path.write_text(HARNESS.format(body=textwrap.dedent(UNHELD_BODY.format(zero="opt.zero_grad()"))))
    res = cli("script", str(path))
    assert res.exit_code == 0, res.output
    assert "optimizers: SGD(momentum=0.9) at " in res.stdout and ": 6 steps" in res.stdout
    assert res.stdout.count("⚠ optimizer: model.2.weight gets gradient but is in no optimizer") == 1
    assert "model.2.weight.grad keeps growing: no optimizer holds it" in res.stdout
