"""Every op of the op table that a script calls is written in the program `gradflow script` offers, and the
program gives the script's own grads.

The oracle is torch: each script runs its own backward() (plain torch, in the script), and the grads it left
are compared with what `gradflow eval` computes from the offered program."""
import pytest
import torch

from gradflow.language.ops import OPS
from gradflow.script.spelling import ATOM, ROWS, Expr, row_call, spell

from .test_script import assert_reproduces, run

LOSSES = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
x = torch.randn(3, 4, requires_grad=True)
t = torch.tensor([0, 3, 1])
p = torch.rand(3, 4)
y = torch.randn(3, 4)
loss = F.cross_entropy(x, t) + F.mse_loss(x, y) + F.binary_cross_entropy(torch.sigmoid(x), p) \\
    + F.l1_loss(x, y, reduction="sum")
loss.backward()
x.grad = None
loss2 = F.smooth_l1_loss(x, y, beta=0.5) + F.nll_loss(F.log_softmax(x, dim=1), t) \\
    + F.binary_cross_entropy_with_logits(x, p, reduction="sum")
loss2.backward()
"""

ELEMENTWISE = """
import torch
torch.manual_seed(1)
x = torch.randn(3, 4, requires_grad=True)
h = x * 1.5
z = torch.where(h > 0, h * 2, h.round()) + h.floor() * h.sign() + h.ceil() * x + h.argmax(dim=1, keepdim=True) * x
z = z + (h <= 0.5) * h + torch.round(h, decimals=1) + h.clamp(min=-0.5) * h.argmin()
z.sum().backward()
"""

LAYERS = """
import torch
import torch.nn.functional as F
torch.manual_seed(2)
x = torch.randn(5, 4, requires_grad=True)
y = torch.randn(5, 2)
lin = torch.nn.Linear(4, 2)
out = lin(x).var(dim=0, unbiased=False).sum() + x.std() + x.sum(dim=1, keepdim=True).mean(0).sum()
out = out + (F.softmax(lin(x), dim=-1) * y).sum() + x.var(0, keepdim=True).sum() + F.linear(x, lin.weight).mean()
out.backward()
"""


SHAPES = """
import torch
torch.manual_seed(3)
x = torch.randn(3, 4, requires_grad=True)
h = x * 2
out = (h.view(-1) * h.reshape(12)).sum() + (h.reshape(4, 3) @ h).sum() + (h.t() @ h).sum() + torch.t(h).mean()
out = out + (h + 1).clamp_(min=-0.5).sum()
out = out + h[0].sum() * h[1:3, ::2].mean() + h[..., -1].sum() + x.sum(dim=(0, 1)) + h.reshape((2, 6))[1, 2]
out.backward()
"""


@pytest.mark.parametrize("script,calls", [(LOSSES, 2), (ELEMENTWISE, 1), (LAYERS, 1), (SHAPES, 1)],
                         ids=["losses", "elementwise", "layers", "shapes"])
def test_the_program_of_each_backward_gives_the_scripts_grads(tmp_path, script, calls):
    recorded = run(tmp_path, script)
    assert len(recorded) == calls
    for call, grads in recorded:
        got = assert_reproduces(call, grads)
        assert set(got) >= {"x"}
        r = call.program.explain()  # the same program through the library
        assert torch.allclose(torch.tensor(r.grad("x")), grads["x"], rtol=1e-5, atol=1e-6)


def test_the_ops_the_issue_names_are_written_by_their_own_names(tmp_path):
    (first, _), (second, _) = run(tmp_path, LOSSES)
    for name in ("cross_entropy(", "mse_loss(", "binary_cross_entropy(", "l1_loss(", "reduction='sum'"):
        assert name in first.program.source, name
    for name in ("smooth_l1_loss(x, y, beta=0.5)", "nll_loss(log_softmax(x, dim=1), t)"):
        assert name in second.program.source, name
    ((call, _),) = run(tmp_path, ELEMENTWISE)
    for name in ("where(h > 0, ", "round(h)", "floor(h)", "sign(h)", "ceil(h)", "argmax(h, dim=1, keepdim=True)",
                 "h <= 0.5", "round(h, decimals=1)", "clamp(h, min=-0.5)", "argmin(h)"):
        assert name in call.program.source, name
    ((call, _),) = run(tmp_path, SHAPES)
    for text in ("h[0]", "h[1:3, ::2]", "h[..., -1]", "sum(x, dim=(0, 1))", "reshape(h, shape=(2, 6))[1, 2]"):
        assert text in call.program.source, text
    ((call, _),) = run(tmp_path, LAYERS)
    assert "var(linear(x, lin_weight, lin_bias), dim=0, correction=0)" in call.program.source  # nn.Linear: F.linear


def _operand(i):
    return Expr(f"a{i}", ATOM)


_SAMPLE = {"int": 2, "dims": 2, "shape": (2, 3), "number": 0.5}


def _sample(p):
    """A value of the parameter's kind other than its default."""
    return p.choices[-1] if p.kind == "str" else (not p.default) if p.kind == "bool" else _SAMPLE[p.kind]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_every_torch_name_of_a_row_is_spelled(name):
    """A recorded call by any torch name the op table lists (with every parameter given, by keyword) is written
    by that row, and the written call names every argument."""
    op = ROWS[name]
    if op.name in ("cat", "stack"):  # a list of tensors is not recorded
        return
    args = tuple(f"t{i}" for i, p in enumerate(op.params) if p.kind == "tensor" and p.required)
    kw = {p.name: _sample(p) for p in op.params if p.kind not in ("tensor", "tensors", "index")}
    expr = row_call(name, args, kw, _operand, lambda i: isinstance(i, int))
    assert expr is not None, name
    for key in kw:
        assert f"{key}=" in expr.text, (name, key, expr.text)
    assert spell(name, args, kw, False, _operand, lambda i: isinstance(i, int)) is not None


def test_a_call_the_row_cannot_say_is_refused():
    """torch's arguments the row has no parameter for (a class weight, label smoothing), a tuple of dims (not
    recorded), or a tensor where the row takes a number: no spelling rather than a program computing else."""
    def refs(i):
        return isinstance(i, int) or i == "min"

    assert spell("cross_entropy", ("a", "b"), {"weight": "w"}, False, _operand, refs) is None
    assert spell("cross_entropy", ("a", "b"), {"label_smoothing": 0.1}, False, _operand, refs) is None
    assert spell("cross_entropy", ("a", "b"), {"label_smoothing": 0.0, "ignore_index": -100}, False, _operand,
                 refs).text == "cross_entropy(a0, a1)"
    assert spell("clamp", ("a",), {"min": "t"}, False, _operand, refs) is None
    assert spell("sum", ("a", object()), {}, False, _operand, refs) is None  # what the recorder keeps Opaque
    assert spell("mse_loss", ("a", "b"), {"reduction": "batchmean"}, False, _operand, refs) is None


def test_every_row_spelled_by_its_torch_names_is_a_row_of_the_table():
    assert {op.name for op in ROWS.values()} == {n for n, op in OPS.items() if op.kind != "flag"
                                                 and op.role == "plain"} - {"index", "min", "max", "minimum",
                                                                            "maximum"}
