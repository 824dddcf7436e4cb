"""Gradient health per layer (report.health(), `inspect --health`, `--plot FILE`): norms by hand, the rule's flags.

Branches `loss = sum_i s_i * w_i . x` with x = 1 give each layer the gradient s_i in every element, so every
norm and every ratio below is written down by hand.
"""
import json
import math
import sys

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import gradflow
from gradflow.cli.app import app
from gradflow.render.health import chart
from gradflow.report.layer_health import HealthReport, LayerHealth, flag

from ..processes import ROOT


class Branches(nn.Module):
    """Layer i is `w_i` (shape 1, or weight 1 + bias 1 for the first one); its gradient is scales[i]."""

    def __init__(self, scales, order=None):
        super().__init__()
        self.first = nn.Linear(1, 1)  # weight and bias: two tensors in one layer
        self.rest = nn.ModuleList(nn.Linear(1, 1, bias=False) for _ in scales[1:])
        self.scales, self.order = scales, order or list(range(len(scales)))

    def forward(self, x):
        layers = [self.first, *self.rest]
        return sum(self.scales[i] * layers[i](x) for i in self.order)


def health_of(model, x=None):
    x = torch.ones(1, 1) if x is None else x
    with gradflow.trace() as t:
        loss = model(x).sum()
    return t.explain(loss, params=model).health()


def test_norms_are_hand_computed_and_the_low_layer_is_flagged_vanishing():
    h = health_of(Branches([1.0, 2.0, 1e-5, 3.0, 4.0]))
    assert [x.name for x in h.layers] == ["first", "rest.0", "rest.1", "rest.2", "rest.3"]
    # first: d/dweight = 1 * x = 1 and d/dbias = 1: norm sqrt(2); the others |s_i|
    assert [x.grad_norm for x in h.layers] == pytest.approx([math.sqrt(2), 2.0, 1e-5, 3.0, 4.0], rel=1e-6)
    assert [x.status for x in h.layers] == ["ok", "ok", "vanishing", "ok", "ok"]
    low = h.layer("rest.1")  # its window sqrt(2), 2, 1e-5, 3, 4: running median 2
    assert low.ratio == pytest.approx(1e-5 / 2, rel=1e-5) and low.flagged
    assert h.layer("first").ratio == pytest.approx(1.0)  # window sqrt(2), 2, 1e-5: the median is itself


def test_one_big_layer_is_exploding_and_the_factor_is_a_strict_100():
    h = health_of(Branches([1e-3, 1e-3, 1.0, 1e-3, 1e-3]))
    assert h.layer("rest.1").status == "exploding" and h.layer("rest.1").ratio == pytest.approx(1000, rel=1e-4)
    assert [x.status for x in h.layers].count("ok") == 4  # an edge layer next to it is not dragged along
    assert h.layer("rest.0").ratio == pytest.approx(1e-3 / ((1e-3 + math.sqrt(2) * 1e-3) / 2), rel=1e-5)
    edge = [LayerHealth(str(i), [], 1, n) for i, n in enumerate([1.0, 1.0, 100.0, 1.0, 1.0])]
    flag(edge)
    assert edge[2].status == "ok" and edge[2].ratio == 100.0  # exactly 100x: not flagged (more than 100x is)


def test_zero_none_and_nonfinite_are_marked_apart_and_are_nobody_s_neighbour():
    model = Branches([1.0, 0.0, 2.0, 3.0, 1.0])
    model.rest[2].requires_grad_(False)  # rest.2: None
    h = health_of(model)
    assert [x.status for x in h.layers] == ["ok", "zero", "ok", "none", "ok"]
    assert h.layer("rest.0").grad_norm == 0.0 and h.layer("rest.2").grad_norm is None
    # rest.1's window skips the zero and None layers: first (sqrt 2), itself (2) and rest.3 (1): median sqrt(2)
    assert h.layer("rest.1").ratio == pytest.approx(math.sqrt(2), rel=1e-6)
    inf = health_of(Branches([1.0, math.inf, 1.0]))
    assert inf.layer("rest.0").status == "nonfinite" and inf.layer("rest.0").grad_norm == math.inf
    nan = health_of(Branches([1.0, 1.0, 1.0]), x=torch.tensor([[math.nan]]))
    assert {x.status for x in nan.layers} == {"nonfinite"} and math.isnan(nan.layers[0].grad_norm)


def test_big_finite_gradients_do_not_overflow_the_norm():
    h = health_of(Branches([1.0, 1e30, 1.0]), x=torch.full((1, 1), 1e10))  # float32 grad 1e40 overflows: inf
    w = Branches([1.0, 3e20, 1.0])
    w.rest[0].weight.data.fill_(1.0)
    big = health_of(w, x=torch.full((1, 1), 1.0)).layer("rest.0")
    assert big.grad_norm == pytest.approx(3e20, rel=1e-6) and big.status != "nonfinite"
    assert h.layer("rest.0").status == "nonfinite"  # the float32 gradient itself is inf


def test_layers_come_in_forward_order_not_definition_order():
    h = health_of(Branches([1.0, 1.0, 1.0, 1.0], order=[3, 1, 0, 2]))
    assert [x.name for x in h.layers] == ["rest.2", "rest.0", "first", "rest.1"]


def test_health_json_and_chart_of_the_example():
    res = CliRunner().invoke(app, ["inspect", f"{ROOT}/examples/layer_scale.py:main", "--health", "--json"])
    assert res.exit_code == 0, res.output
    layers = {x["layer"]: x for x in json.loads(res.stdout)["health"]["layers"]}
    assert layers["blocks.2.fc1"]["status"] == layers["blocks.2.fc2"]["status"] == "vanishing"
    assert layers["extra.0"]["status"] == "zero" and layers["extra.0"]["grad_norm"] == 0.0
    res = CliRunner().invoke(app, ["inspect", f"{ROOT}/examples/layer_scale.py:main", "--health"],
                             env={"COLUMNS": "100"})
    lines = res.stdout.splitlines()
    assert lines[0].startswith("gradient norm per layer, in forward order")
    assert [ln.split()[0] for ln in lines[1:13]][:3] == ["embed", "blocks.0.fc1", "blocks.0.fc2"]
    assert "▼ vanishing" in lines[6] and lines[11].split()[1:3] == ["0", "0"]


def test_health_keeps_the_report_s_warnings_and_exit_code():
    res = CliRunner().invoke(app, ["inspect", f"{ROOT}/examples/frozen_encoder.py:main", "--health"],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0 and "warning: encoder.norm is frozen (requires_grad=False)" in res.stderr
    lines = res.stdout.splitlines()
    name, bar, norm = lines[5].split()[:3]
    assert (name, norm) == ("head", "0.591848") and max(map(len, lines)) <= 80
    width = len(lines[7].strip())  # the axis, 1e-01 ... 1e+00, spans the bars' width
    eighths = 8 * bar.count("█") + (" ▏▎▍▌▋▊▉".index(bar[-1]) if bar[-1] != "█" else 0)
    assert eighths == round((math.log10(0.591848) + 1) * width * 8)  # log scale from 1e-01 to 1e+00


def test_chart_marks_none_and_nonfinite():
    h = HealthReport([LayerHealth("a", [], 1, 1.0), LayerHealth("b", [], 1, None, "none"),
                      LayerHealth("c", [], 1, math.inf, "nonfinite")])
    text = chart(h).plain.splitlines()
    assert text[2].split()[:3] == ["b", "—", "None"] and "no gradient (None)" in text[2]
    assert text[3].split()[:3] == ["c", "!", "inf"] and "! nonfinite" in text[3]


@pytest.mark.slow  # matplotlib: ~5 s
def test_plot_writes_a_picture(tmp_path):
    target = f"{ROOT}/examples/layer_scale.py:main"
    res = CliRunner().invoke(app, ["inspect", target, "--health", "--plot", str(tmp_path / "h.png")])
    assert res.exit_code == 0 and (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert res.stdout.startswith("gradient norm per layer") and f"wrote {tmp_path / 'h.png'}" in res.stderr
    res = CliRunner().invoke(app, ["inspect", target, "--plot", str(tmp_path / "h.svg")])
    assert res.exit_code == 0 and b"<svg" in (tmp_path / "h.svg").read_bytes()


def test_plot_refuses_clearly_before_running_anything(tmp_path, monkeypatch):
    target = f"{ROOT}/examples/layer_scale.py:main"
    res = CliRunner().invoke(app, ["inspect", target, "--plot", str(tmp_path / "h.txt")])
    assert res.exit_code == 2 and "cannot tell the picture format" in res.stderr
    assert "--health draws the chart in the terminal" in res.stderr
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    res = CliRunner().invoke(app, ["inspect", target, "--plot", str(tmp_path / "h2.png")])
    assert res.exit_code == 2 and "needs matplotlib" in res.stderr and "gradflow[plot]" in res.stderr
    assert not (tmp_path / "h2.png").exists()
    res = CliRunner().invoke(app, ["inspect", target, "--health", "--graph", "dot"])
    assert res.exit_code == 2 and "either --health or --graph" in res.stderr


def test_a_tiny_gradient_is_not_reported_exactly_zero():
    """Regression: the norm was a float32 sum of squares, which is 0 for elements below ~1e-23: a gradient of
    1e-30 in every element was reported as "exactly zero" (and its route's share as None)."""
    w = nn.Parameter(torch.ones(4))
    with gradflow.trace() as t:
        loss = (w * 1e-30).sum() + (w * 3e-30).sum()
    p = t.explain(loss, params={"w": w}).param("w")
    assert p.status == "live" and p.grad_norm == pytest.approx(2 * 4e-30, rel=1e-6)  # |(4e-30,)*4| = 8e-30
    assert [r.share for r in p.routes] == pytest.approx([0.25, 0.75], rel=1e-5)
    assert [r.norm for r in p.routes] == pytest.approx([2e-30, 6e-30], rel=1e-5)
    big = nn.Parameter(torch.ones(4))
    with gradflow.trace() as t:
        loss = (big * 1e30).sum()  # squares of 1e30 overflow float32: the norm was inf
    assert t.explain(loss, params={"b": big}).param("b").grad_norm == pytest.approx(2e30, rel=1e-6)
