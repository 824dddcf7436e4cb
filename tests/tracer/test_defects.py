"""Issue 13's five defects on small own modules (the same on real models: tests/report/test_real_models.py).

Ground truth is plain torch on a fresh copy built from the same seed: `p.grad is None` after a plain
`loss.backward()`, the gradients themselves, and finite differences where a value (not a gradient) reaches the
loss. Source lines are found by marker comments in this file (`# <name>`).
"""
import json
from pathlib import Path

import pytest
import torch
import torch.utils.checkpoint as cp
from torch import nn

import gradflow
from gradflow.tracer.source_lines import short_path

HERE = Path(__file__)
X = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.2, -1.0]])


def line_of(marker: str) -> str:
    """`file:N` for the line carrying `# <marker>`, as reports name it (relative to the working directory)."""
    for n, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# <{marker}>"):
            return f"{short_path(str(HERE))}:{n}"
    raise AssertionError(marker)


def plain_none(build, forward) -> dict[str, bool]:
    """{name: grad is None} after a plain backward on a fresh model (the oracle)."""
    model = build()
    forward(model).backward()
    return {n: p.grad is None for n, p in model.named_parameters()}


def explain(build, forward):
    model = build()
    with gradflow.trace() as t:
        loss = forward(model)
    return model, loss, t.explain(loss, params=model)


def summary(report) -> dict:
    """What a user reads, per parameter: status, reason, grad norm, and each route's op, line and share."""
    return {p.name: (p.status, p.why, None if p.grad_norm is None else round(p.grad_norm, 5),
                     [(r.op, r.line, None if r.share is None else round(r.share, 4)) for r in p.routes])
            for p in report.params}


# ---- 1. reentrant checkpointing ------------------------------------------------------------------------------
class Stack(nn.Module):
    """first -> inner (checkpointed or not, several ways) -> last; `inner` has a detach inside on request."""

    def __init__(self, how="plain", cut=False):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.inner, self.last = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)
        self.side = nn.Linear(3, 3)
        self.how, self.cut = how, cut

    def block(self, h):
        h = self.inner(h).relu()  # <block>
        if self.cut:
            h = h + self.side(h).detach()  # <block_cut>
        return h * 2

    def forward(self, x):
        h = self.first(x)
        if self.how == "reentrant":
            h = cp.checkpoint(self.block, h, use_reentrant=True)
        elif self.how == "non_reentrant":
            h = cp.checkpoint(self.block, h, use_reentrant=False)
        elif self.how == "sequential":
            h = cp.checkpoint_sequential([self.block, nn.Identity()], 2, h, use_reentrant=True)
        else:
            h = self.block(h)
        return self.last(h).pow(2).sum()


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("how", ["reentrant", "non_reentrant", "sequential"])
def test_every_checkpointing_flavour_gives_the_report_of_no_checkpointing(how, cut):
    _, _, base = explain(lambda: Stack("plain", cut), lambda m: m(X))
    model, _, report = explain(lambda: Stack(how, cut), lambda m: m(X))
    assert report.error is None and summary(report) == summary(base)
    truth = Stack("plain", cut)
    truth(X).backward()
    for name, p in truth.named_parameters():
        got = report.param(name).grad
        assert (got is None) == (p.grad is None)
        if got is not None:
            torch.testing.assert_close(got, p.grad)
    assert report.param("inner.weight").status == "live"
    assert [r.line for r in report.param("inner.weight").routes] == [line_of("block")]
    if cut:
        side = report.param("side.weight")
        assert side.status == "cut" and side.cuts[0].kind == "detach" and side.cuts[0].line == line_of("block_cut")
    assert all(p.grad is None for p in model.parameters())  # explaining left .grad alone


def test_reentrant_checkpoint_with_an_input_that_requires_grad():
    """autograd.grad refuses outright here ("incompatible with .grad()"): the report must still be complete."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 3)
    x = X.clone().requires_grad_()
    with gradflow.trace() as t:
        loss = cp.checkpoint(lambda a: lin(a).relu(), x, use_reentrant=True).sum()
    report = t.explain(loss, params={"x": x, "weight": lin.weight, "bias": lin.bias})
    assert report.error is None and [p.status for p in report.params] == ["live", "live", "live"]
    torch.manual_seed(0)
    lin2, x2 = nn.Linear(3, 3), X.clone().requires_grad_()
    lin2(x2).relu().sum().backward()
    torch.testing.assert_close(report.param("weight").grad, lin2.weight.grad)
    torch.testing.assert_close(report.param("x").grad, x2.grad)
    assert [r.share for r in report.param("weight").routes] == [pytest.approx(1.0)]
    assert x.grad is None and lin.weight.grad is None


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
@pytest.mark.parametrize("where,kind,how", [("frozen_input", "checkpoint", None),
                                            ("no_grad", "no_grad", "torch.no_grad()")])
def test_a_reentrant_checkpoint_autograd_does_not_record_is_a_cut(where, kind, how):
    """A reentrant checkpoint given no input that requires grad (or run under no_grad) is not recorded at all:
    the parameters inside get no gradient, a well-known trap when the layers below are frozen."""
    torch.manual_seed(0)
    inner, last = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward():
        if where == "no_grad":
            with torch.no_grad():
                h = cp.checkpoint(inner, X, use_reentrant=True)  # <ckpt_no_grad>
        else:
            h = cp.checkpoint(inner, X, use_reentrant=True)  # <ckpt_frozen_input>
        return last(h).sum()

    with gradflow.trace() as t:
        loss = forward()
    report = t.explain(loss, params={"inner.weight": inner.weight, "last.weight": last.weight})
    forward().backward()
    assert inner.weight.grad is None and last.weight.grad is not None  # plain torch
    p = report.param("inner.weight")
    line = line_of("ckpt_no_grad" if where == "no_grad" else "ckpt_frozen_input")
    if kind == "checkpoint":  # the checkpoint's call, and the fix by name
        how = f"torch.utils.checkpoint called at {line}; fix: `model.enable_input_require_grads()` " \
              "(transformers, peft) or `use_reentrant=False`"
    assert p.status == "cut" and [(c.kind, c.how, c.line) for c in p.cuts] == [(kind, how, line)]
    assert report.param("last.weight").status == "live" and report.error is None


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_a_reentrant_checkpoint_nested_in_another_is_untraced_not_cut():
    """Inside an outer checkpoint's forward, gradients are off because of that checkpoint (it is no cut): the
    inner one is recorded during the outer's recomputation, which gradflow does not follow (yet)."""
    def build():
        torch.manual_seed(0)
        return nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(a, b, c):
        outer = lambda h: cp.checkpoint(lambda g: b(g).relu(), a(h), use_reentrant=True) * 2  # noqa: E731
        return c(cp.checkpoint(outer, X.clone().requires_grad_(), use_reentrant=True)).sum()

    a, b, c = build()
    with gradflow.trace() as t:
        loss = forward(a, b, c)
    report = t.explain(loss, params={"a": a.weight, "b": b.weight, "c": c.weight})
    truth = build()
    forward(*truth).backward()
    assert [p.status for p in report.params] == ["live", "untraced", "live"]
    for p, lin in zip(report.params, truth):
        torch.testing.assert_close(p.grad, lin.weight.grad)


# ---- 2. initialisation is not a use ---------------------------------------------------------------------------
class Initialised(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3)
        self.emb = nn.Embedding(5, 3, padding_idx=0)  # zeroes a row of its weight under no_grad
        nn.init.orthogonal_(self.b.weight)  # new_empty / view_as from b.weight
        nn.init.trunc_normal_(self.c.weight, std=0.02)
        self.c.bias.data.normal_()  # `.data`
        self.register_buffer("scale", self.b.weight.new_tensor([2.0]))  # new_tensor, grad on
        with torch.no_grad():
            self.register_buffer("norm", self.c.weight.norm())  # a read under no_grad

    def forward(self, x):
        h = self.a(x) * self.scale
        self.b(x)  # <really_unused>
        return h.sum()


def test_initialisation_is_not_a_use_when_the_trace_builds_the_model():
    with gradflow.trace() as t:
        model = Initialised()
        loss = model(X)
    report = t.explain(loss, params=model)
    assert {p.name: p.grad is None for p in report.params} == plain_none(Initialised, lambda m: m(X))
    for name in ("c.weight", "c.bias", "emb.weight"):
        assert (report.param(name).status, report.param(name).reason) == ("unused", "not used in the forward")
    b = report.param("b.weight")  # used in the forward, by an op whose result is dropped
    assert b.status == "unused" and b.reason == (f"used by `linear` at {line_of('really_unused')}, but nothing "
                                                 "computed from it reaches the loss (unused branch)")
    assert report.param("a.weight").status == "live"


# ---- 3. Python numbers and re-wrapping are cuts ---------------------------------------------------------------
class Scaled(nn.Module):
    """loss = out(x) * s, where s comes from `scale` through a Python number or a fresh tensor."""

    def __init__(self, how):
        super().__init__()
        torch.manual_seed(0)
        self.scale, self.out, self.log = nn.Linear(3, 1), nn.Linear(3, 1), nn.Linear(3, 1)
        self.how = how

    def forward(self, x):
        s = self.scale(x).mean()
        if self.how == "item":
            k = s.item()  # <item>
        elif self.how == "float":
            k = float(s)  # <float>
        elif self.how == "int":
            k = int(s * 1000 + 5000)  # <int>
        elif self.how == "tolist":
            k = torch.tensor(s.reshape(1).tolist())  # <tolist>
        elif self.how == "numpy":
            k = torch.from_numpy(s.detach().numpy())  # <numpy>
        elif self.how == "tensor":
            k = torch.tensor(s)  # <tensor>
        elif self.how == "as_tensor":
            k = torch.as_tensor([s, s])  # <as_tensor>
        print(self.log(x).mean().item())  # logging: the value goes nowhere near the loss
        return (self.out(x) * k).sum()


KINDS = {"item": ("item", "item"), "float": ("item", "__float__"), "int": ("item", "__int__"),
         "tolist": ("item", "tolist"), "numpy": ("detach", "detach"), "tensor": ("rewrap", "tensor"),
         "as_tensor": ("rewrap", "as_tensor")}


def _loss_of_scale_bias(how, delta):
    model = Scaled(how)
    with torch.no_grad():
        model.scale.bias += delta
    return float(model(X))


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad", "ignore:To copy construct")
@pytest.mark.parametrize("how", list(KINDS))
def test_a_value_that_leaves_torch_is_a_cut_on_the_users_line(how, capsys):
    _, _, report = explain(lambda: Scaled(how), lambda m: m(X))
    assert {p.name: p.grad is None for p in report.params} == plain_none(lambda: Scaled(how), lambda m: m(X))
    # the value reaches the loss (finite differences), the gradient does not (plain torch: None)
    changes = _loss_of_scale_bias(how, 0.5) != _loss_of_scale_bias(how, 0.0)
    assert changes
    p = report.param("scale.bias")
    kind, op = KINDS[how]
    assert p.status == "cut" and [(c.kind, c.op, c.line) for c in p.cuts] == [(kind, op, line_of(how))]
    assert line_of(how) in p.reason
    assert report.param("out.weight").status == "live"
    log = report.param("log.weight")  # its number was printed, never used: not a cut
    assert log.status == "unused" and "left torch" in log.reason and "`.item()`" in log.reason
    d = json.loads(report.to_json())
    (cut,) = [q for q in d["params"] if q["name"] == "scale.bias"][0]["cuts"]
    assert cut["kind"] == kind and cut["line"] == line_of(how)
    capsys.readouterr()


# ---- 4. cuts name the user's line, and how gradients were switched off -----------------------------------------
def test_set_grad_enabled_is_named_as_such():
    model = Stack()
    with gradflow.trace() as t:
        h = model.first(X)
        with torch.set_grad_enabled(False):
            h = model.inner(h)  # <set_grad_enabled>
        torch.set_grad_enabled(False)
        h = model.side(h) + h  # <bare_switch>
        torch.set_grad_enabled(True)
        loss = model.last(h).sum()
    report = t.explain(loss, params=model)
    first = report.param("first.weight")
    assert first.status == "cut" and first.reason == (
        f"cut: `linear` ran under torch.set_grad_enabled(False) at {line_of('set_grad_enabled')} (in inner)")
    side = report.param("side.weight")
    assert side.reason == f"cut: `linear` ran under torch.set_grad_enabled(False) at {line_of('bare_switch')} (in side)"


@torch.no_grad()
def _decorated(model, h):
    return model.inner(h)


def test_no_grad_as_a_decorator_names_the_call():
    model = Stack()
    with gradflow.trace() as t:
        h = _decorated(model, model.first(X))  # <decorated>
        loss = model.last(h).sum()
    first = t.explain(loss, params=model).param("first.weight")
    assert first.status == "cut" and "ran under @torch.no_grad()" in first.reason
    assert first.cuts[0].line == f"{short_path(str(HERE))}:{_decorated.__wrapped__.__code__.co_firstlineno + 2}"


# ---- 5. explaining leaves the training step as it was ---------------------------------------------------------
def _step(model, explain_first: bool):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradflow.trace() as t:
        loss = model(X)
    if explain_first:
        report = t.explain(loss, params=model)
        assert all(p.grad is None for p in model.parameters())  # .grad untouched by explaining
        assert report.param("last.weight").status == "live"
    loss.backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
    opt.step()
    return grads, {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("how", ["plain", "reentrant", "non_reentrant"])
def test_explain_then_the_users_backward_and_step_work_as_without_gradflow(how):
    grads, after = _step(Stack(how, cut=True), explain_first=True)
    model, opt = Stack(how, cut=True), None
    model(X).backward()  # no gradflow at all
    for n, p in model.named_parameters():
        assert (grads[n] is None) == (p.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(grads[n], p.grad)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()
    for n, p in model.named_parameters():
        torch.testing.assert_close(after[n], p.detach())


def test_explaining_twice_gives_the_same_report():
    model = Stack("reentrant", cut=True)
    with gradflow.trace() as t:
        loss = model(X)
    assert summary(t.explain(loss, params=model)) == summary(t.explain(loss, params=model))


@pytest.mark.parametrize("how", ["plain", "reentrant"])
def test_explaining_leaves_retained_grads_alone(how):
    model = Stack(how)
    with gradflow.trace() as t:
        h = model.first(X)
        h.retain_grad()
        loss = model.last(cp.checkpoint(model.block, h, use_reentrant=True) if how == "reentrant"
                          else model.block(h)).sum()
    t.explain(loss, params=model)
    assert h.grad is None and all(p.grad is None for p in model.parameters())
    loss.backward()
    truth = Stack(how)
    h2 = truth.first(X)
    h2.retain_grad()
    truth.last(truth.block(h2)).sum().backward()
    torch.testing.assert_close(h.grad, h2.grad)
