"""When the trace cannot see part of the computation, the report says so instead of giving a confident wrong reason.

The ground truth is plain torch: the same model built again from the same seed, `loss.backward()`, and each
parameter's `.grad`. Whatever gradflow reports, `grad is None` must agree with it; a parameter gradflow cannot
explain is "untraced" (exit 4 in the command), with the reason.
"""
import json
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint as cp
from torch import nn

import gradflow

HERE = Path(__file__)


def line_of(marker: str) -> str:
    for n, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# <{marker}>"):
            return f"{HERE.relative_to(Path.cwd()) if HERE.is_relative_to(Path.cwd()) else HERE}:{n}"
    raise AssertionError(marker)


class Reentrant(torch.autograd.Function):
    """Like a reentrant checkpoint: uses `lin` from the closure (not an input) and backpropagates into it itself."""

    @staticmethod
    def forward(ctx, x, lin):
        ctx.save_for_backward(x)
        ctx.lin = lin
        return lin(x).tanh()  # <function_use>

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = x.detach().requires_grad_()
        with torch.enable_grad():
            out = ctx.lin(x).tanh()
        torch.autograd.backward(out, g)
        return x.grad, None


class Opaque(torch.autograd.Function):
    """Uses `lin` from the closure, and its backward gives it nothing: plain backward leaves its grad None too."""

    @staticmethod
    def forward(ctx, x, lin):
        return lin(x) * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None  # not the true derivative; what matters is that lin gets nothing


class Net(nn.Module):
    def __init__(self, how):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.inner, self.last = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)
        self.how = how

    def forward(self, x):
        h = self.first(x)
        if self.how == "reentrant":
            h = cp.checkpoint(lambda a: self.inner(a).relu(), h, use_reentrant=True)  # <checkpoint>
        elif self.how == "non_reentrant":
            h = cp.checkpoint(lambda a: self.inner(a).relu(), h, use_reentrant=False)
        elif self.how == "function":
            h = Reentrant.apply(h, self.inner)
        elif self.how == "opaque":
            h = Opaque.apply(h, self.inner)
        elif self.how == "detach":
            h = self.inner(h.detach())
        else:
            h = self.inner(h)
        return self.last(h)


X = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.2, -1.0]])


def plain_grads(how) -> dict:
    """Plain torch on a fresh copy: {name: .grad after loss.backward()}."""
    model = Net(how)
    model(X).sum().backward()
    return {name: p.grad for name, p in model.named_parameters()}


def traced(how):
    model = Net(how)
    with gradflow.trace() as t:
        loss = model(X).sum()
    return model, t.explain(loss, params=model)


@pytest.mark.parametrize("how", ["plain", "detach", "non_reentrant", "reentrant", "function", "opaque"])
def test_grad_is_none_exactly_when_plain_backward_gives_none(how):
    model, report = traced(how)
    truth = plain_grads(how)
    assert {p.name: p.grad is None for p in report.params} == {k: g is None for k, g in truth.items()}
    for p in report.params:
        if p.grad is not None:
            torch.testing.assert_close(p.grad, truth[p.name], rtol=1e-6, atol=1e-7)
    assert all(p.grad is None for p in model.parameters())  # .grad is left alone, also by the check


@pytest.mark.parametrize("how,why", [
    ("function", "used inside the autograd.Function Reentrant at {line} without being one of its inputs"),
])
def test_what_the_trace_cannot_see_is_untraced_with_the_reason(how, why):
    _, report = traced(how)
    statuses = {p.name: p.status for p in report.params}
    assert statuses == {"first.weight": "live", "first.bias": "live", "inner.weight": "untraced",
                        "inner.bias": "untraced", "last.weight": "live", "last.bias": "live"}
    p = report.param("inner.weight")
    assert p.reason.startswith(why.format(line=line_of("function_use"), checkpoint=line_of("checkpoint"))) and p.reason.endswith("a plain loss.backward() gives it a gradient")
    assert p.grad_norm == pytest.approx(float(plain_grads(how)["inner.weight"].norm()), rel=1e-6)
    assert report.error is not None and report.error.exit_code == 4 and report.error.kind == "untraced"
    d = json.loads(report.to_json())
    assert d["counts"]["untraced"] == 2 and d["error"]["kind"] == "untraced"


def test_a_function_that_really_sends_nothing_back_is_not_untraced():
    _, report = traced("opaque")
    p = report.param("inner.weight")
    assert p.status == "unreached" and p.grad is None and report.error is None  # plain torch agrees: None


def test_a_reentrant_checkpoint_is_traced_through_its_recomputation():
    """The checkpoint's forward ran with grad off; its recomputation in the explaining backward is recorded."""
    _, report = traced("reentrant")
    assert {p.status for p in report.params} == {"live"} and report.error is None
    (route,) = report.param("inner.weight").routes
    assert route.line == line_of("checkpoint") and route.share == pytest.approx(1.0)


def test_a_loss_alone_with_a_reentrant_checkpoint_and_an_input_that_requires_grad():
    """autograd.grad refuses to run through a reentrant checkpoint when a leaf it needs is behind it: the report
    comes from a plain backward instead (and .grad is put back)."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    x = X.clone().requires_grad_()
    with gradflow.trace() as t:
        loss = cp.checkpoint(lambda a: lin(a).relu(), x, use_reentrant=True).sum()
    report = t.explain(loss)  # x is found as a stray leaf: autograd.grad would need to go through the checkpoint
    assert {p.status for p in report.params} == {"live"}
    (x_report,) = [p for p in report.params if p.name.startswith("tensor@")]
    torch.manual_seed(0)
    lin2, x2 = nn.Linear(3, 3), X.clone().requires_grad_()
    cp.checkpoint(lambda a: lin2(a).relu(), x2, use_reentrant=True).sum().backward()
    torch.testing.assert_close(x_report.grad, x2.grad)
    assert report.param("weight").status == "live" and x.grad is None and lin.weight.grad is None


def test_cli_reports_untraced_and_exits_4(cli, tmp_path):
    f = tmp_path / "ckpt.py"
    f.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Closure(torch.autograd.Function):  # uses `lin` without being given it\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, lin):\n"
        "        ctx.save_for_backward(x)\n"
        "        ctx.lin = lin\n"
        "        return lin(x).relu()\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        x = x.detach().requires_grad_()\n"
        "        with torch.enable_grad():\n"
        "            torch.autograd.backward(ctx.lin(x).relu(), g)\n"
        "        return x.grad, None\n\n"
        "def main():\n"
        "    torch.manual_seed(0)\n"
        "    lin = nn.Linear(3, 3)\n"
        "    x = torch.ones(2, 3, requires_grad=True)\n"
        "    return Closure.apply(x, lin).sum(), lin\n")
    r = cli("inspect", f"{f}:main", "--json")
    assert r.exit_code == 4
    d = json.loads(r.stdout)
    assert [p["status"] for p in d["params"]] == ["untraced", "untraced"]
    assert all(not p["grad_is_none"] for p in d["params"])
    assert "error: 2 parameters could not be traced: weight, bias" in r.stderr
    table = cli("inspect", f"{f}:main")
    assert table.exit_code == 4 and "? weight" in table.stdout and "untraced" in table.stdout


def test_a_reentrant_checkpoint_without_parameters_inside_leaves_grad_alone():
    """autograd.grad refuses (the checkpoint lies between the loss and `first`); the plain backward used instead
    must put every .grad back, though no parameter is used inside the checkpoint."""
    torch.manual_seed(0)
    first, last = nn.Linear(3, 3), nn.Linear(3, 1)
    with gradflow.trace() as t:
        h = cp.checkpoint(lambda a: a.relu() * 2, first(X), use_reentrant=True)
        loss = last(h).sum()
    report = t.explain(loss, params={"first.weight": first.weight, "last.weight": last.weight})
    assert [p.status for p in report.params] == ["live", "live"] and report.error is None
    assert first.weight.grad is None and last.weight.grad is None
    torch.manual_seed(0)
    first2, last2 = nn.Linear(3, 3), nn.Linear(3, 1)
    last2(cp.checkpoint(lambda a: a.relu() * 2, first2(X), use_reentrant=True)).sum().backward()
    torch.testing.assert_close(report.param("first.weight").grad, first2.weight.grad)


def test_a_parameter_used_where_the_trace_cannot_see_is_untraced_not_unused():
    """A thread runs part of the forward (the trace follows one thread): `inner` is used and cut there, so plain
    torch gives it no gradient, but "not used in the forward" would be a wrong reason."""
    from concurrent.futures import ThreadPoolExecutor

    def forward(model):
        h = model.first(X)
        with ThreadPoolExecutor(1) as pool:
            side = pool.submit(lambda: model.inner(h).detach() + h).result()
        return model.last(side + h).sum()  # <came_in>

    model = Net("plain")
    with gradflow.trace() as t:
        loss = forward(model)
    report = t.explain(loss, params=model)
    truth = Net("plain")
    forward(truth).backward()
    assert {p.name: p.grad is None for p in report.params} == {n: p.grad is None for n, p in truth.named_parameters()}
    p = report.param("inner.weight")
    assert p.status == "untraced" and p.grad is None
    assert p.reason.startswith(f"not used in the forward gradflow saw, but part of the computation ran outside the "
                               f"trace (`add` at {line_of('came_in')} used a tensor computed there")
    assert report.param("first.weight").status == "live" and report.error.exit_code == 4
    assert "in one thread" in report.error.hint
