"""inspect's module picture: no cycle (no two nodes pointing at each other), and parameters of different
status never merged into one box. Models are plain torch / transformers from tiny configs."""
from __future__ import annotations

import pytest
import torch

import gradflow
from gradflow.report.module_picture import build_picture

from .test_real_models import gpt2, lm_loss


def _acyclic(edges) -> bool:
    out: dict[str, list[str]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
    state: dict[str, int] = {}

    def visit(n: str) -> bool:
        state[n] = 1
        for m in out.get(n, ()):
            if state.get(m) == 1 or (m not in state and not visit(m)):
                return False
        state[n] = 2
        return True

    return all(visit(n) for n in list(out) if n not in state)


def test_gpt2_picture_has_no_two_way_edge_nor_cycle():
    model = gpt2()
    with gradflow.trace() as t:
        loss = lm_loss(model)
    pic = build_picture(t.explain(loss, params=model))
    assert not [(a, b) for a, b in pic.edges if (b, a) in pic.edges]
    assert _acyclic(pic.edges)
    assert any(label.endswith("(continued)") for label in pic.labels.values())  # transformer after wte


class Half(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 1)})

    def forward(self, x):
        return self.block["b"](self.block["a"](x).detach()).sum()


def test_a_module_of_mixed_status_gets_a_box_per_status():
    model = Half()
    with gradflow.trace() as t:
        loss = model(torch.randn(4, 3))
    report = t.explain(loss, params=model)
    assert {p.status for p in report.params} == {"cut", "live"}  # plain torch agrees: only b.* gets a grad
    loss.backward()
    assert model.block["a"].weight.grad is None and model.block["b"].weight.grad is not None
    labels = build_picture(report, depth=1).labels
    assert labels["m:block [cut]"] == "block [cut]\n2 params: 2 cut"
    assert labels["m:block [live]"] == "block [live]\n2 params: 2 live"
    assert "m:block" not in labels or not labels["m:block"].startswith("block\n4 params")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
