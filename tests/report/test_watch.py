"""gradflow.watch across the steps of a real training loop, against plain torch in the same loop.

After each backward the loop itself records what torch says (`p.grad is None`, all zero, finite, and for
accumulated gradients whether `.grad` changed at all); the watch must say the same at every step.
"""
import json

import pytest
import torch
from torch import nn

import gradflow


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.body, self.head, self.aux = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x, aux=False, zero=False, blow_up=False):
        h = torch.relu(self.body(self.embed(x)))
        out = self.head(h) * (0 * self.scale if zero else self.scale)
        if blow_up:
            out = out * torch.sqrt(self.scale - 1)  # d/dscale sqrt(0) = inf
        return (out + self.aux(h) if aux else out).sum()


def truth(model) -> dict[str, str]:
    out = {}
    for name, p in model.named_parameters():
        g = p.grad
        out[name] = "frozen" if not p.requires_grad else "none" if g is None else \
            "nonfinite" if not torch.isfinite(g).all() else "zero" if (g == 0).all() else "live"
    return out


SCHEDULE = [  # per step: (freeze embed?, use aux?, zero?, blow up?)
    (True, False, False, False), (True, True, False, False), (False, False, True, False),
    (False, True, False, False), (False, False, False, True), (False, True, False, False),
]


def test_statuses_per_step_match_plain_torch():
    model, x = Net(), torch.randn(3, 4)
    seen = []
    with gradflow.watch(model) as w:
        for frozen, aux, zero, blow_up in SCHEDULE:
            model.embed.requires_grad_(not frozen)
            model(x, aux, zero, blow_up).backward()
            seen.append(truth(model))
            assert w.step() == seen[-1]
            model.zero_grad()
    for step, expected in enumerate(seen):
        assert {w_.name: w_.status_at(step) for w_ in w.params} == expected
    assert {p.name for p in w.changed} == {n for n in seen[0] if len({s[n] for s in seen}) > 1}
    assert w.param("embed.weight").runs == [["frozen", 0, 1], ["zero", 2, 2], ["live", 3, 3], ["zero", 4, 4],
                                            ["live", 5, 5]]  # d sqrt(scale - 1) / d out is 0 at step 4
    assert w.param("aux.bias").steps_by_status() == {"none": [(0, 0), (2, 2), (4, 4)], "live": [(1, 1), (3, 3),
                                                                                                 (5, 5)]}
    assert w.param("scale").runs == [["live", 0, 1], ["zero", 2, 2], ["live", 3, 3], ["nonfinite", 4, 4],
                                     ["live", 5, 5]]
    doc = json.loads(w.to_json())
    assert doc["steps"] == 6 and doc["params"][1]["name"] == "embed.weight"
    assert doc["params"][1]["runs"][0] == {"status": "frozen", "first": 0, "last": 1}


def test_accumulated_gradients_count_what_arrived_this_step():
    """No zero_grad at all: aux's .grad stays from step 0, but nothing arrives at steps 1-2."""
    model, x = Net(), torch.randn(3, 4)
    w = gradflow.watch(model)
    arrived = []
    for aux in (True, False, False, True):
        before = None if model.aux.weight.grad is None else model.aux.weight.grad.clone()
        for _ in range(2):  # two micro-batches per step
            model(x, aux).backward()
        after = model.aux.weight.grad
        arrived.append(after is not None and (before is None or not torch.equal(before, after)))
        w.step()
    w.close()
    assert arrived == [True, False, False, True]
    assert w.param("aux.weight").runs == [["live", 0, 0], ["none", 1, 2], ["live", 3, 3]]


def test_an_optimizer_closes_the_steps_and_marks_untrained():
    model, x = Net(), torch.randn(3, 4)
    opt = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("head.")], lr=0.01)
    with gradflow.watch(model, optimizer=opt) as w:
        for step in range(4):
            if step == 2:
                opt.add_param_group({"params": list(model.head.parameters())})  # progressive training
            model(x).backward()
            held = {id(p) for g in opt.param_groups for p in g["params"]}
            expected = {n: "untrained" if p.grad is not None and id(p) not in held else s
                        for (n, p), s in zip(model.named_parameters(), truth(model).values())}
            opt.step()
            opt.zero_grad()
            assert {p.name: p.status_at(step) for p in w.params} == expected
    assert w.steps == 4
    assert w.param("head.weight").runs == [["untrained", 0, 1], ["live", 2, 3]]
    assert w.param("aux.weight").runs == [["none", 0, 3]]


def test_summary_and_close():
    model, x = Net(), torch.randn(3, 4)
    w = gradflow.watch(model)
    for step in range(3):
        model.embed.requires_grad_(step > 0)
        model(x, aux=step == 1).backward()
        w.step()
        model.zero_grad()
    assert w.summary() == "\n".join([
        "3 steps, 9 parameter tensors",
        "changed status between steps (4):",
        "  embed.weight, embed.bias: frozen at step 0; live at steps 1-2",
        "  aux.weight, aux.bias: none at steps 0, 2; live at step 1",
        "live at every step (5)",
    ])
    w.close()
    model(x, aux=True).backward()
    assert w._got == {} and w.step()["aux.weight"] == "none"  # no hook fires any more


def test_a_dict_of_tensors_and_a_bad_argument():
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    with gradflow.watch({"a": a, "b": b}) as w:
        (a * 2).sum().backward()
        assert w.step() == {"a": "live", "b": "none"}
    with pytest.raises(gradflow.GradflowError, match="watch\\(\\) takes a Module or a dict"):
        gradflow.watch([a, b])


def test_reasons_on_demand_from_a_traced_step():
    model, x = Net(), torch.randn(3, 4)
    with gradflow.watch(model) as w:
        with pytest.raises(gradflow.GradflowError, match=r"needs the forward recorded by w.trace\(\)"):
            w.explain(model(x))
        for step in range(3):
            if step < 2:
                with w.trace():
                    loss = model(x, aux=step == 1)
                report = w.explain(loss)
                assert report.param("aux.weight").status == ("live" if step == 1 else "unused")
            else:
                loss = model(x, aux=False)
            loss.backward()  # explain kept the graph
            seen = truth(model)
            assert w.step() == seen
            model.zero_grad()
    assert w.param("aux.weight").reasons == {0: "not used in the forward"}
    assert w.summary().splitlines()[2:4] == ["  aux.weight, aux.bias: none at steps 0, 2; live at step 1",
                                             "    why at step 0: not used in the forward"]
    assert w.to_dict()["params"][-1]["reasons"] == {"0": "not used in the forward"}
