"""Trace.run_leaf, the one shortcut beside the general path: a call of torch's own Linear, LayerNorm or GELU runs
with the trace's mode off and its op is recorded by the same `_record`. Oracle: the same forward with the
shortcut off (every op seen by the mode) gives the same records, uses and report."""
import pytest
import torch
from torch.overrides import TorchFunctionMode

import gradflow
import gradflow.tracer.trace as trace_module

nn = torch.nn


def _plain():
    m = nn.Sequential(nn.Linear(4, 6), nn.LayerNorm(6), nn.GELU(), nn.Linear(6, 6, bias=False),
                      nn.LayerNorm(6, elementwise_affine=False), nn.GELU(approximate="tanh"), nn.Linear(6, 2))
    return m, lambda: m(torch.ones(3, 4)).sum()


def _hooks():
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.GELU())
    m[0].register_forward_hook(lambda mod, a, out: out * 2)
    m[1].register_forward_pre_hook(lambda mod, a: (a[0] + 1,))
    return m, lambda: m(torch.ones(2, 3)).sum()


def _shared_and_cut():
    lin, norm = nn.Linear(3, 3), nn.LayerNorm(3)
    m = nn.ModuleDict({"lin": lin, "norm": norm})

    def step():
        h = norm(lin(lin(torch.ones(2, 3))))  # the same Linear twice: its uses are hooked
        with torch.no_grad():
            frozen = lin(h)
        return (h + frozen).sum() + lin(lin.weight).sum()  # a Linear given its own weight
    return m, step


def _half():
    m = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3), nn.GELU()).to(torch.bfloat16)
    return m, lambda: m(torch.ones(2, 3, dtype=torch.bfloat16)).float().sum()


class _Counting(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _user_mode():
    m = nn.Sequential(nn.Linear(3, 3), nn.GELU())

    def step():
        with _Counting():  # the user's own mode is innermost: it must see the ops
            return m(torch.ones(2, 3)).sum()
    return m, step


def _traced(build, whole: bool, monkeypatch):
    if not whole:
        monkeypatch.setattr(trace_module, "_LEAVES", {})
    torch.manual_seed(0)
    model, step = build()
    with gradflow.trace() as t:
        loss = step()
    report = t.explain(loss, params=model)
    monkeypatch.undo()
    names = {id(m): n for n, m in model.named_modules()}
    ops = [(r.name, r.ins, r.outs, r.grad_enabled, r.cut, r.line, r.library_line, r.how, names.get(r.module))
           for r in t.ops]
    uses = [(u.serial, u.op, u.whole, u.hidden) for u in t.state.uses]
    return ops, uses, report.to_dict(), sorted(names[i] for i in t.state.modules)


@pytest.mark.parametrize("build", [_plain, _hooks, _shared_and_cut, _half, _user_mode])
def test_leaf_modules_run_whole_give_the_records_and_report_of_the_general_path(build, monkeypatch):
    assert _traced(build, True, monkeypatch) == _traced(build, False, monkeypatch)
