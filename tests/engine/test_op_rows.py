"""Every row of the op table, run as a program and checked two independent ways: plain torch (the same
computation written with torch's own functions, its gradients from torch's autograd) and central finite
differences of that torch computation in float64. A new row must add its case here (the first test says so).

Cuts (detach, no_grad, inference_mode) change the gradient but not the value: finite differences see through
them, so they are checked against torch only. round/floor/ceil/sign have gradient 0 in torch, and their
finite differences are 0 too away from their jumps; argmax/argmin give integer indices and no gradient."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradflow import explain
from gradflow.language.ops import OPS

X = [0.3, -1.2, 0.7, 2.1]
Y = [1.1, 0.4, -0.6, 0.9]
M = [[0.3, -1.2, 0.7], [2.1, 0.5, -0.4]]
W = [[0.5, -0.3, 0.2], [0.1, 0.8, -0.7], [-0.2, 0.4, 0.6], [0.9, -0.5, 0.3]]
P = [0.2, 0.7, 0.4, 0.9]  # probabilities
T = [0.0, 1.0, 1.0, 0.0]  # binary targets
CLS = [2.0, 0.0]  # class indices of M's two rows

# op name -> (program, values, torch's computation of the same on float64 tensors, leaves given but not
# differentiated)
CASES = {
    "add": ("(x + y).sum()", {"x": X, "y": Y}, lambda x, y: (x + y).sum()),
    "sub": ("(x - 2*y).sum()", {"x": X, "y": Y}, lambda x, y: (x - 2 * y).sum()),
    "mul": ("(x * y).sum()", {"x": X, "y": Y}, lambda x, y: (x * y).sum()),
    "div": ("(x / (y + 3)).sum()", {"x": X, "y": Y}, lambda x, y: (x / (y + 3)).sum()),
    "matmul": ("(m @ w).sum()", {"m": M, "w": W[:3]}, lambda m, w: (m @ w).sum()),
    "neg": ("(-x * y).sum()", {"x": X, "y": Y}, lambda x, y: (-x * y).sum()),
    "pow": ("(x ^ 3).sum()", {"x": X}, lambda x: (x ** 3).sum()),
    "gt": ("((x > y) * x).sum()", {"x": X, "y": Y}, lambda x, y: ((x > y) * x).sum()),
    "lt": ("((x < y) * x).sum()", {"x": X, "y": Y}, lambda x, y: ((x < y) * x).sum()),
    "ge": ("((x >= 0.5) * x).sum()", {"x": X}, lambda x: ((x >= 0.5) * x).sum()),
    "le": ("((x <= 0.5) * x).sum()", {"x": X}, lambda x: ((x <= 0.5) * x).sum()),
    "eq": ("((x == y) * x + x).sum()", {"x": X, "y": Y}, lambda x, y: ((x == y) * x + x).sum()),
    "ne": ("((x != y) * x).sum()", {"x": X, "y": Y}, lambda x, y: ((x != y) * x).sum()),
    "index": ("x[1:3].sum() * x[0]", {"x": X}, lambda x: x[1:3].sum() * x[0]),
    "detach": ("(detach(x) * x).sum()", {"x": X}, lambda x: (x.detach() * x).sum()),
    "no_grad": ("(no_grad(x * y) * x).sum()", {"x": X, "y": Y}, lambda x, y: (_no_grad(lambda: x * y) * x).sum()),
    "inference_mode": ("inference_mode(x * 2).sum() + x.sum()", {"x": X},
                       lambda x: _inference(lambda: x * 2).sum() + x.sum()),
    "exp": ("exp(x).sum()", {"x": X}, lambda x: x.exp().sum()),
    "log": ("log(x * x).sum()", {"x": X}, lambda x: (x * x).log().sum()),
    "sqrt": ("sqrt(x * x + 1).sum()", {"x": X}, lambda x: (x * x + 1).sqrt().sum()),
    "abs": ("abs(x).sum()", {"x": X}, lambda x: x.abs().sum()),
    "sin": ("sin(x).sum()", {"x": X}, lambda x: x.sin().sum()),
    "cos": ("cos(x).sum()", {"x": X}, lambda x: x.cos().sum()),
    "tan": ("tan(x / 2).sum()", {"x": X}, lambda x: (x / 2).tan().sum()),
    "tanh": ("tanh(x).sum()", {"x": X}, lambda x: x.tanh().sum()),
    "sigmoid": ("sigmoid(x).sum()", {"x": X}, lambda x: x.sigmoid().sum()),
    "relu": ("(relu(x) * y).sum()", {"x": X, "y": Y}, lambda x, y: (x.relu() * y).sum()),
    "clamp": ("(clamp(x, min=-1, max=1) * y).sum()", {"x": X, "y": Y}, lambda x, y: (x.clamp(-1, 1) * y).sum()),
    "maximum": ("maximum(x, y).sum()", {"x": X, "y": Y}, lambda x, y: torch.maximum(x, y).sum()),
    "minimum": ("minimum(x, y).sum()", {"x": X, "y": Y}, lambda x, y: torch.minimum(x, y).sum()),
    "round": ("(round(x * 3) * x).sum() + torch.round(y, decimals=1).sum()", {"x": X, "y": Y},
              lambda x, y: ((x * 3).round() * x).sum() + y.round(decimals=1).sum()),
    "floor": ("(floor(x) * x).sum()", {"x": X}, lambda x: (x.floor() * x).sum()),
    "ceil": ("(x.ceil() * y).sum()", {"x": X, "y": Y}, lambda x, y: (x.ceil() * y).sum()),
    "sign": ("(torch.sign(x) * y).sum()", {"x": X, "y": Y}, lambda x, y: (x.sign() * y).sum()),
    "where": ("where(x > y, x * x, y).sum()", {"x": X, "y": Y}, lambda x, y: torch.where(x > y, x * x, y).sum()),
    "sum": ("(sum(m, axis=0) * sum(m, dim=1, keepdims=True)).sum()", {"m": M},
            lambda m: (m.sum(0) * m.sum(1, keepdim=True)).sum()),
    "mean": ("mean(m, axis=1).pow(2).sum() + m.mean()", {"m": M}, lambda m: m.mean(1).pow(2).sum() + m.mean()),
    "min": ("min(x) * 2", {"x": X}, lambda x: x.min() * 2),
    "max": ("max(x) * 2", {"x": X}, lambda x: x.max() * 2),
    "variance": ("var(x) + m.var(dim=1).sum() + torch.var(m, axis=0, ddof=0).sum()", {"x": X, "m": M},
                 lambda x, m: x.var() + m.var(dim=1).sum() + m.var(dim=0, correction=0).sum()),
    "std": ("std(x) + m.std(0, correction=0).sum()", {"x": X, "m": M},
            lambda x, m: x.std() + m.std(0, correction=0).sum()),
    "argmax": ("x[0] * argmax(x) + (m * argmax(m, dim=1, keepdim=True)).sum()", {"x": X, "m": M},
               lambda x, m: x[0] * x.argmax() + (m * m.argmax(dim=1, keepdim=True)).sum()),
    "argmin": ("x[0] * x.argmin() + (m * torch.argmin(m, axis=0)).sum()", {"x": X, "m": M},
               lambda x, m: x[0] * x.argmin() + (m * m.argmin(dim=0)).sum()),
    "softmax": ("(softmax(m, dim=1) * m).sum()", {"m": M}, lambda m: (m.softmax(1) * m).sum()),
    "log_softmax": ("(log_softmax(m, dim=0) * m).sum()", {"m": M}, lambda m: (m.log_softmax(0) * m).sum()),
    "normalize": ("(F.normalize(m, dim=1) * m).sum()", {"m": M}, lambda m: (F.normalize(m, dim=1) * m).sum()),
    "linear": ("(F.linear(m, w, b) * F.linear(m, w)).sum()", {"m": M, "w": W, "b": X},
               lambda m, w, b: (F.linear(m, w, b) * F.linear(m, w)).sum()),
    "cross_entropy": ("F.cross_entropy(m, t)", {"m": M, "t": CLS}, lambda m, t: F.cross_entropy(m, t.long()), ["t"]),
    "mse_loss": ("F.mse_loss(x, y)", {"x": X, "y": Y}, lambda x, y: F.mse_loss(x, y)),
    "binary_cross_entropy_with_logits": ("F.binary_cross_entropy_with_logits(x, t)", {"x": X, "t": T},
                                         lambda x, t: F.binary_cross_entropy_with_logits(x, t)),
    "binary_cross_entropy": ("F.binary_cross_entropy(p, t) + F.binary_cross_entropy(sigmoid(x), p, reduction='sum')",
                             {"p": P, "t": T, "x": X}, lambda p, t, x: F.binary_cross_entropy(p, t)
                             + F.binary_cross_entropy(x.sigmoid(), p, reduction="sum"), ["t"]),
    "l1_loss": ("F.l1_loss(x, y) + l1_loss(x, y, reduction='sum')", {"x": X, "y": Y},
                lambda x, y: F.l1_loss(x, y) + F.l1_loss(x, y, reduction="sum")),
    "smooth_l1_loss": ("F.smooth_l1_loss(x, y) + F.smooth_l1_loss(x, y, beta=0.5, reduction='sum')",
                       {"x": X, "y": Y}, lambda x, y: F.smooth_l1_loss(x, y)
                       + F.smooth_l1_loss(x, y, beta=0.5, reduction="sum")),
    "nll_loss": ("F.nll_loss(F.log_softmax(m, dim=1), t)", {"m": M, "t": CLS},
                 lambda m, t: F.nll_loss(m.log_softmax(1), t.long()), ["t"]),
    "reshape": ("(reshape(m, (3, 2)) @ m).sum()", {"m": M}, lambda m: (m.reshape(3, 2) @ m).sum()),
    "view": ("(m.view(-1) * x[0]).sum()", {"m": M, "x": X}, lambda m, x: (m.view(-1) * x[0]).sum()),
    "t": ("(m.t() @ m).sum()", {"m": M}, lambda m: (m.t() @ m).sum()),
    "clone": ("(x.clone() * x).sum()", {"x": X}, lambda x: (x.clone() * x).sum()),
    "cat": ("(cat([x, y * 2]) * cat([y, x])).sum()", {"x": X, "y": Y},
            lambda x, y: (torch.cat([x, y * 2]) * torch.cat([y, x])).sum()),
    "stack": ("(stack([x, y], dim=1) * stack([y, x], dim=1)).sum()", {"x": X, "y": Y},
              lambda x, y: (torch.stack([x, y], 1) * torch.stack([y, x], 1)).sum()),
}


def _no_grad(f):
    with torch.no_grad():
        return f()


def _inference(f):
    with torch.inference_mode():
        return f().clone()  # an inference tensor cannot be saved for backward: a normal copy of its value


def test_every_row_of_the_op_table_has_a_case():
    assert set(CASES) == {name for name, op in OPS.items() if op.kind != "flag"}


def _torch_grads(fn, values: dict, leaves: list[str]):
    ts = {k: torch.tensor(v, dtype=torch.float64, requires_grad=k in leaves) for k, v in values.items()}
    out = fn(**ts)
    grads = torch.autograd.grad(out, [ts[k] for k in leaves], allow_unused=True) if out.requires_grad else \
        [None] * len(leaves)
    return out.item(), dict(zip(leaves, grads))


def _finite_differences(fn, values: dict, leaf: str, h=1e-6) -> np.ndarray:
    base = {k: torch.tensor(v, dtype=torch.float64) for k, v in values.items()}
    grad = np.zeros(tuple(base[leaf].shape))
    for i in np.ndindex(grad.shape):
        up, down = dict(base), dict(base)
        up[leaf], down[leaf] = base[leaf].clone(), base[leaf].clone()
        up[leaf][i] += h
        down[leaf][i] -= h
        with torch.no_grad():
            grad[i] = (fn(**up).item() - fn(**down).item()) / (2 * h)
    return grad


@pytest.mark.parametrize("name", list(CASES))
def test_each_row_against_torch_and_finite_differences(name):
    source, values, fn, *rest = CASES[name]
    leaves = [k for k in values if k not in (rest[0] if rest else [])]
    r = explain(source, values=values, wrt=leaves, dtype="float64")
    assert r.error is None, r.error
    value, grads = _torch_grads(fn, values, leaves)
    assert r.output.value.item() == pytest.approx(value, rel=1e-12, abs=1e-12)
    for leaf in leaves:
        want = grads[leaf]
        if want is None:
            assert r.grad(leaf) is None, (name, leaf)
            continue
        got = np.array(r.grad(leaf))
        assert got == pytest.approx(want.numpy(), rel=1e-10, abs=1e-12), (name, leaf)
        if OPS[name].role == "plain":
            assert got == pytest.approx(_finite_differences(fn, values, leaf), rel=1e-5, abs=1e-6), (name, leaf)


def test_rounding_ops_have_zero_gradient_and_argmax_none():
    """As in torch: round/floor/ceil/sign pass a gradient of exactly 0 (not None); argmax gives integer indices
    with no gradient at all, and says so."""
    for fn in ("round", "floor", "ceil", "sign"):
        r = explain(f"{fn}(x).sum()", x=[0.4, -1.6])
        assert r.grad("x") == [0.0, 0.0] and r.nodes[-2].requires_grad, fn
    r = explain("argmax(x) * 1.0", x=[0.4, 2.0, -1.0])
    node = next(n for n in r.nodes if n.op == "argmax")
    assert node.value.item() == 1 and node.value.dtype == torch.int64 and not node.requires_grad
    assert r.grad("x") is None and r.why["x"] == ("every path from x to L goes through argmax(x), which carries no "
                                                  "gradient (argmax and argmin give integer indices, as in torch)")


def test_var_and_std_default_to_torchs_correction():
    """x = [1, 2, 4]: mean 7/3, squared deviations sum 14/3; torch divides by n - 1 = 2 (7/3), numpy's ddof=0
    by n = 3 (14/9)."""
    assert explain("var(x)", dtype="float64", x=[1, 2, 4]).output.value.item() == pytest.approx(7 / 3)
    assert explain("x.var(ddof=0)", dtype="float64", x=[1, 2, 4]).output.value.item() == pytest.approx(14 / 9)
    assert explain("std(x, correction=0)", dtype="float64", x=[1, 2, 4]).output.value.item() == pytest.approx(
        (14 / 9) ** 0.5)


def test_numpy_and_torch_keywords_name_one_parameter():
    from gradflow import ParseError

    with pytest.raises(ParseError, match="multiple values for argument 'dim'"):
        explain("sum(x, dim=0, axis=0)", x=[1, 2])
    with pytest.raises(ParseError, match="unexpected keyword argument 'axes'"):
        explain("sum(x, axes=0)", x=[1, 2])


def test_whatif_and_flows_run_on_the_new_ops():
    """whatif detaches each live node: detaching linear(m, w) leaves m only var(m)'s gradient, as torch says
    with that node detached; --flows splits m's grad between its two uses, and the two sum to it."""
    from gradflow.studies.whatif import whatif

    values = {"m": M, "w": W, "y": [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]]}
    source = "F.smooth_l1_loss(linear(m, w), y, beta=0.5) + var(m) + argmax(m)"
    w = whatif(source, wrt=["m", "w"], dtype="float64", values=values)
    row = next(s for s in w.scenarios if s.node == "linear(m, w)")
    ts = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}
    out = F.smooth_l1_loss(F.linear(ts["m"], ts["w"]).detach(), ts["y"], beta=0.5) + ts["m"].var()
    (want,) = torch.autograd.grad(out, [ts["m"]])
    assert row.grads["m"].numpy() == pytest.approx(want.numpy(), rel=1e-12) and row.grads["w"] is None
    r = explain(source, wrt=["m"], dtype="float64", values=values)
    flows = {c.via: np.array(c.flow.tolist()) for c in r.flows["m"]}
    assert set(flows) == {"linear(m, w)", "var(m)", "argmax(m)"} and not flows["argmax(m)"].any()
    assert sum(flows.values()) == pytest.approx(np.array(r.grad("m")), rel=1e-12)


def test_the_budget_knows_linears_result_shape():
    """input (..., in) and weight (out, in): (..., out), as torch computes it; refused before allocating."""
    from gradflow import LimitError
    from gradflow.engine.budget import result_shape

    assert result_shape("linear", [(5, 3), (7, 3)]) == (5, 7)
    assert result_shape("linear", [(2, 5, 3), (7, 3), (7,)]) == (2, 5, 7)
    assert result_shape("linear", [(3,), (7, 3)]) == (7,)
    assert tuple(F.linear(torch.ones(2, 5, 3), torch.ones(7, 3)).shape) == (2, 5, 7)
    with pytest.raises(LimitError, match="would have"):
        explain("linear(x, w).sum()", values={"x": [[1.0] * 2] * 3000, "w": [[1.0] * 2] * 3000},
                limits={"elements": 10 ** 6})  # a 3000×3000 result
