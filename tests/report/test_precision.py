"""Mixed precision in inspect: gradients that underflow to 0 or overflow to inf in float16/bfloat16, and where.

The oracle is plain torch in float64: the same model (deep-copied, .double()) on the same data. An element
underflowed when the half-precision gradient is exactly 0 and the float64 one is not; it overflowed when the
half-precision one is inf/nan and the float64 one finite.
"""
import copy
import json
import sys

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import gradflow
from gradflow.cli.app import app

from ..processes import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import mixed_precision as example  # noqa: E402

MSE_LINE = next(n for n, text in enumerate((ROOT / "examples" / "mixed_precision.py").read_text().splitlines(), 1)
                if "loss = nn.functional.mse_loss(model(X), Y)" in text)


def float64_grads(model, x, y, scale=1.0):
    m64 = copy.deepcopy(model).double()
    (nn.functional.mse_loss(m64(x.double()), y.double()) * scale).backward()
    return {n: p.grad for n, p in m64.named_parameters()}


def traced(fn):
    with gradflow.trace() as t:
        loss, model = fn()
    return t.explain(loss, params=model), model


def test_float16_underflow_is_counted_per_element_as_float64_says_and_placed_at_the_op():
    report, model = traced(example.step)
    ref = float64_grads(model, example.X, example.Y)
    lost = {n: int(((p.grad == 0) & (ref[n] != 0)).sum()) for n, p in zip(ref, report.params)}
    assert all(lost.values())  # every parameter lost some elements here
    found = {f.param: f for f in report.precision.findings}
    assert {n: f.elements for n, f in found.items()} == lost
    assert {(f.kind, f.dtype, f.op, f.line) for f in found.values()} == \
        {("underflow", "float16", "mse_loss", f"examples/mixed_precision.py:{MSE_LINE}")}
    assert report.param("0.weight").why.startswith(f"{lost['0.weight']} of 16384 elements of its gradient "
                                                   "underflowed to exactly 0 in float16 at `mse_loss`")
    assert all(p.grad is None for p in model.parameters())  # .grad untouched


def test_a_grad_scaler_removes_the_underflow():
    report, model = traced(example.scaled_step)
    ref = float64_grads(model, example.X, example.Y, scale=65536.0)
    assert all(int(((p.grad == 0) & (ref[n] != 0)).sum()) == 0 for n, p in zip(ref, report.params))
    assert report.precision.dtypes == ["float16"] and report.precision.findings == []


def test_bfloat16_autocast_underflow_below_its_range_matches_float64():
    model = example.build()

    def tiny():  # errors of 1e-3 averaged over 32,768 elements, times 1e-36: ~6e-44, below bfloat16's 9.2e-41
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return nn.functional.mse_loss(model(example.X), example.Y) * 1e-36, model

    report, _ = traced(tiny)
    ref = float64_grads(model, example.X, example.Y, scale=1e-36)
    lost = {n: int(((p.grad == 0) & (ref[n] != 0)).sum()) for n, p in zip(ref, report.params)}
    found = {f.param: f.elements for f in report.precision.findings}
    # float64 also counts the few elements whose bfloat16 sum cancelled to exactly 0 (8-bit mantissas): those
    # stay 0 with the loss scaled up too, and are not underflow
    assert sum(lost.values()) > 0 and found.keys() == {n for n, k in lost.items() if k}
    assert all(0.99 * lost[n] <= k <= lost[n] for n, k in found.items())
    assert {f.dtype for f in report.precision.findings} == {"bfloat16"} and report.precision.scale == 2.0 ** 64


def test_float16_overflow_is_found_and_placed():
    model = example.build()

    def huge():
        with torch.autocast("cpu", dtype=torch.float16):
            return nn.functional.mse_loss(model(example.X), example.Y) * 1e11, model  # <huge>

    report, _ = traced(huge)
    ref = float64_grads(model, example.X, example.Y, scale=1e11)
    bad = {n: int((~p.grad.isfinite() & ref[n].isfinite()).sum()) for n, p in zip(ref, report.params)}
    found = {f.param: f for f in report.precision.findings if f.kind == "overflow"}
    assert {n: f.elements for n, f in found.items()} == {n: k for n, k in bad.items() if k} and found
    huge_line = next(n for n, text in enumerate(open(__file__).read().splitlines(), 1) if text.endswith("# <huge>"))
    # the first op whose gradient for its inputs is inf while the gradient it received is finite: the last linear
    assert {(f.op, f.line) for f in found.values()} == {("linear", f"tests/report/test_precision.py:{huge_line}")}
    assert "overflowed to inf/nan in float16" in report.param("2.bias").why


def test_json_has_precision_only_for_half_precision_and_the_user_step_still_runs():
    res = CliRunner().invoke(app, ["inspect", f"{ROOT}/examples/mixed_precision.py:step", "--json"])
    doc = json.loads(res.stdout)
    assert doc["precision"]["dtypes"] == ["float16"] and len(doc["precision"]["findings"]) == 4
    res = CliRunner().invoke(app, ["inspect", f"{ROOT}/examples/frozen_encoder.py:main", "--json"])
    assert "precision" not in json.loads(res.stdout)
    model = example.build()
    with gradflow.trace() as t:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(example.X), example.Y)
    t.explain(loss, params=model, retain_graph=True)
    loss.backward()  # the precision passes left the graph as retain_graph asked
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_no_findings_when_nothing_under_or_overflows(dtype):
    model = nn.Linear(3, 2)
    with gradflow.trace() as t:
        with torch.autocast("cpu", dtype=dtype):
            loss = model(torch.ones(4, 3)).float().sum()
    report = t.explain(loss, params=model)
    assert report.precision.findings == [] and [p.status for p in report.params] == ["live", "live"]


@pytest.mark.parametrize("reentrant", [True, False])
def test_underflow_is_found_the_same_when_part_of_the_model_is_checkpointed(reentrant):
    # A reentrant checkpoint refuses torch.autograd.grad: the precision passes crashed explain with torch's
    # "incompatible with .grad()" whenever a gradient held an exact 0. Same findings as without a checkpoint.
    from torch.utils.checkpoint import checkpoint

    def step():
        model = example.build()
        with torch.autocast("cpu", dtype=torch.float16):
            out = checkpoint(lambda h: model[2](model[1](h)), model[0](example.X), use_reentrant=reentrant)
            loss = nn.functional.mse_loss(out, example.Y)
        return loss, model

    report, model = traced(step)
    ref = float64_grads(model, example.X, example.Y)
    lost = {n: int(((p.grad == 0) & (ref[n] != 0)).sum()) for n, p in zip(ref, report.params)}
    assert all(lost.values())
    assert {f.param: f.elements for f in report.precision.findings} == lost
    assert {(f.kind, f.op) for f in report.precision.findings} == {("underflow", "mse_loss")}
    assert all(p.grad is None for p in model.parameters())  # .grad untouched
    loss, fresh = step()
    loss.backward()  # the user's own step runs; plain torch gives every parameter a gradient, as the report says
    assert all(p.grad is not None for p in fresh.parameters()) and all(p.grad is not None for p in report.params)
