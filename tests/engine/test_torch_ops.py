"""The ops PyTorch code uses (indexing, dim reductions, softmax, losses, normalize, where, clamp, cat, stack,
shapes) against independent oracles: each program's meaning written again in numpy, differentiated by central
finite differences in float64, and hand-derived values. Never torch against gradflow only."""
import numpy as np
import pytest

from gradflow import EvalError, explain

RNG = np.random.default_rng(7)


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=axis, keepdims=True))


def _bce_logits(a, t):
    return np.maximum(a, 0) - a * t + np.log1p(np.exp(-np.abs(a)))


def _normalize(a, p, axis):
    norm = (np.abs(a) ** p).sum(axis=axis, keepdims=True) ** (1 / p)
    return a / np.maximum(norm, 1e-12)


def away(shape, gap=0.2):
    """Random values kept `gap` away from 0 and from one another (no kinks or ties for clamp/where/maximum)."""
    n = int(np.prod(shape))
    vals = (np.arange(n) - n / 2 + 0.5) * gap * 2 + RNG.uniform(-gap / 3, gap / 3, n)
    return RNG.permutation(vals).reshape(shape)


X34, W34, X4, W3 = away((3, 4)), RNG.normal(size=(3, 4)), away((4,)), RNG.normal(size=3)
T_CLASS = np.array([0.0, 3.0, 1.0])
T_PROB = _softmax(RNG.normal(size=(3, 4)), 1)

CASES = [  # program, {leaf: value}, numpy meaning, leaves that are not differentiated (class indices)
    ("x[1:3].sum() * x[0] + x[-1]**2", {"x": X4}, lambda x: x[1:3].sum() * x[0] + x[-1] ** 2),
    ("(x[:, 0] * x[..., -1]).sum() + x[1][2]", {"x": X34}, lambda x: (x[:, 0] * x[..., -1]).sum() + x[1][2]),
    ("x[-1, ::2].pow(2).sum() + x[0:2, 1:].mean()", {"x": X34}, lambda x: (x[-1, ::2] ** 2).sum() + x[0:2, 1:].mean()),
    ("(x.sum(dim=0) * w[0]).sum()", {"x": X34, "w": W34}, lambda x, w: (x.sum(axis=0) * w[0]).sum()),
    ("(x.mean(dim=-1, keepdim=True) * x * w).sum()", {"x": X34, "w": W34},
     lambda x, w: (x.mean(axis=-1, keepdims=True) * x * w).sum()),
    ("torch.sum(x, 1).pow(2).sum() + x.sum(dim=(0, 1))", {"x": X34},
     lambda x: (x.sum(axis=1) ** 2).sum() + x.sum()),
    ("sum(x, 0, True).exp().sum()", {"x": X34 / 4}, lambda x: np.exp(x.sum(axis=0, keepdims=True)).sum()),
    ("(F.softmax(x, dim=-1) * w).sum()", {"x": X34, "w": W34}, lambda x, w: (_softmax(x, -1) * w).sum()),
    ("(x.softmax(0) * w).sum()", {"x": X34, "w": W34}, lambda x, w: (_softmax(x, 0) * w).sum()),
    ("(torch.log_softmax(x, 1) * w).sum()", {"x": X34, "w": W34}, lambda x, w: (_log_softmax(x, 1) * w).sum()),
    ("F.cross_entropy(x, t)", {"x": X34, "t": T_CLASS},
     lambda x, t: -_log_softmax(x, 1)[np.arange(3), t.astype(int)].mean(), ["t"]),
    ("F.cross_entropy(x, t, reduction='sum')", {"x": X34, "t": T_CLASS},
     lambda x, t: -_log_softmax(x, 1)[np.arange(3), t.astype(int)].sum(), ["t"]),
    ("(F.cross_entropy(x, t, reduction='none') * w).sum()", {"x": X34, "t": T_CLASS, "w": W3},
     lambda x, t, w: (-_log_softmax(x, 1)[np.arange(3), t.astype(int)] * w).sum(), ["t"]),
    ("F.cross_entropy(x, p)", {"x": X34, "p": T_PROB}, lambda x, p: -(p * _log_softmax(x, 1)).sum(axis=1).mean()),
    ("F.mse_loss(x, w)", {"x": X34, "w": W34}, lambda x, w: ((x - w) ** 2).mean()),
    ("F.mse_loss(x, w, reduction='sum')", {"x": X34, "w": W34}, lambda x, w: ((x - w) ** 2).sum()),
    ("F.binary_cross_entropy_with_logits(x, p)", {"x": X34, "p": T_PROB}, lambda x, p: _bce_logits(x, p).mean()),
    ("torch.nn.functional.binary_cross_entropy_with_logits(x, p, reduction='sum')", {"x": X34, "p": T_PROB},
     lambda x, p: _bce_logits(x, p).sum()),
    ("(F.normalize(x) * w).sum()", {"x": X34, "w": W34}, lambda x, w: (_normalize(x, 2, 1) * w).sum()),
    ("(F.normalize(x, p=1, dim=0) * w).sum()", {"x": X34, "w": W34}, lambda x, w: (_normalize(x, 1, 0) * w).sum()),
    ("torch.where(x > 0, x**2, -x * w).sum()", {"x": X34, "w": W34},
     lambda x, w: np.where(x > 0, x ** 2, -x * w).sum()),
    ("torch.where(x <= 0.5, x, 0).sum() + torch.where(x != 0, 1, x).sum()", {"x": X34},
     lambda x: np.where(x <= 0.5, x, 0).sum() + np.where(x != 0, 1, x).sum()),
    ("torch.clamp(x, min=-0.5, max=0.7).pow(2).sum()", {"x": X34}, lambda x: (np.clip(x, -0.5, 0.7) ** 2).sum()),
    ("(x.clamp(max=0.3) * w).sum() + x.clip(-1).sum()", {"x": X34, "w": W34},
     lambda x, w: (np.minimum(x, 0.3) * w).sum() + np.maximum(x, -1).sum()),
    ("(torch.maximum(x, w) + torch.minimum(x, 0.1)).sum()", {"x": X34, "w": away((3, 4), 0.13) + 0.05},
     lambda x, w: (np.maximum(x, w) + np.minimum(x, 0.1)).sum()),
    ("(torch.cat([x, w * 2], dim=0) * v).sum()", {"x": X34, "w": W34, "v": RNG.normal(size=(6, 4))},
     lambda x, w, v: (np.concatenate([x, w * 2], 0) * v).sum()),
    ("(torch.cat((x, w), 1).exp() * v).sum()", {"x": X34 / 3, "w": W34 / 3, "v": RNG.normal(size=(3, 8))},
     lambda x, w, v: (np.exp(np.concatenate([x, w], 1)) * v).sum()),
    ("(torch.stack([x, w], dim=1) * v).sum()", {"x": X34, "w": W34, "v": RNG.normal(size=(3, 2, 4))},
     lambda x, w, v: (np.stack([x, w], 1) * v).sum()),
    ("(x.reshape(4, 3).t() @ w.T).sum()", {"x": X34, "w": W34}, lambda x, w: (x.reshape(4, 3).T @ w.T).sum()),
    ("x.view(-1).clone().pow(3).sum() + torch.reshape(x, (2, 6))[1, 5]", {"x": X34},
     lambda x: (x.reshape(-1) ** 3).sum() + x.reshape(2, 6)[1, 5]),
    ("torch.t(x).matmul(w).sum() + x.T.sum()", {"x": X34, "w": W34}, lambda x, w: (x.T @ w).sum() + x.sum()),
]


def _fd(f, values: dict, leaf: str, h=1e-6) -> np.ndarray:
    """Central finite differences of f (numpy, float64) with respect to every element of one leaf."""
    base = {k: np.array(v, dtype=np.float64) for k, v in values.items()}
    grad = np.zeros_like(base[leaf])
    for i in np.ndindex(grad.shape):
        up, down = dict(base), dict(base)
        up[leaf], down[leaf] = base[leaf].copy(), base[leaf].copy()
        up[leaf][i] += h
        down[leaf][i] -= h
        grad[i] = (f(**up) - f(**down)) / (2 * h)
    return grad


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_value_and_gradient_against_numpy_and_finite_differences(case):
    source, values, f = case[:3]
    fixed = case[3] if len(case) > 3 else []
    leaves = [k for k in values if k not in fixed]
    r = explain(source, wrt=leaves, dtype="float64", values={k: v.tolist() for k, v in values.items()})
    assert r.error is None, r.error
    assert r.output.value.item() == pytest.approx(f(**values), rel=1e-10, abs=1e-12)
    for leaf in leaves:
        got = np.array(r.grad(leaf))
        assert got == pytest.approx(_fd(f, values, leaf), rel=1e-6, abs=1e-7), (source, leaf)


def test_cross_entropy_of_one_sample_hand_derived():
    """x = [1, 2, 3], class 2: L = log(e + e^2 + e^3) - 3; dL/dx = softmax(x) - onehot(2)."""
    r = explain("F.cross_entropy(x, t)", wrt="x", dtype="float64", x=[1, 2, 3], t=2)
    e = np.exp([1.0, 2.0, 3.0])
    assert r.output.value.item() == pytest.approx(np.log(e.sum()) - 3, rel=1e-12)
    assert r.grad("x") == pytest.approx((e / e.sum() - [0, 0, 1]).tolist(), rel=1e-12)
    assert r.output.value.item() == pytest.approx(0.40760596444, rel=1e-10)


def test_softmax_of_a_small_vector_hand_derived():
    """softmax([0, ln 3]) = [1/4, 3/4]; d(s_1)/dx = s_1 (onehot(1) - s) = [-3/16, 3/16]."""
    r = explain("F.softmax(x, dim=0)[1]", dtype="float64", x=[0, float(np.log(3))])
    assert r.output.value.item() == pytest.approx(0.75, rel=1e-12)
    assert r.grad("x") == pytest.approx([-3 / 16, 3 / 16], rel=1e-12)


def test_mse_and_bce_hand_derived():
    r = explain("F.mse_loss(x, y)", wrt="x", x=[1, 2], y=[0, 0])  # mean(x^2) = 2.5, d/dx = 2x/2 = x
    assert r.output.value.item() == 2.5 and r.grad("x") == [1.0, 2.0]
    r = explain("F.binary_cross_entropy_with_logits(x, t)", wrt="x", dtype="float64", x=0, t=1)
    assert r.output.value.item() == pytest.approx(np.log(2)) and r.grad("x") == pytest.approx(-0.5)  # σ(0) - 1


def test_indexing_gradient_scatters_back_per_use():
    """x = [2, 3, 5]: L = x[0] * x[1:].sum() = 2 * 8. Via x[0]: [8, 0, 0]; via x[1:]: [0, 2, 2]."""
    r = explain("x[0] * x[1:].sum()", x=[2, 3, 5])
    assert r.output.value.item() == 16 and r.grad("x") == [8.0, 2.0, 2.0]
    assert [(c.via, c.flow.tolist()) for c in r.flows["x"]] == [("x[0]", [8.0, 0.0, 0.0]),
                                                                ("x[1:]", [0.0, 2.0, 2.0])]
    assert [n.grad_fn for n in r.nodes if n.op == "index"] == ["SelectBackward0", "SliceBackward0"]


def test_comparisons_are_boolean_and_carry_no_gradient():
    r = explain("torch.where(x > 0, x, 0.5 * x).sum()", x=[-2, 3])
    gt = next(n for n in r.nodes if n.op == "gt")
    assert gt.value.tolist() == [False, True] and not gt.requires_grad and gt.grad is None
    assert r.grad("x") == [0.5, 1.0]
    assert [(c.via, c.flow.tolist()) for c in r.flows["x"]][0] == ("x > 0", [0.0, 0.0])
    for op, want in [("<", [True, False]), (">=", [False, True]), ("<=", [True, True]), ("==", [False, True]),
                     ("!=", [True, False])]:
        r = explain(f"sum(x * (x {op} 3))", x=[-2, 3])
        assert r.nodes[-3].value.tolist() == want, op
    r = explain("(x > 1).sum()", x=[1, 2])
    assert r.error.kind == "no_gradient" and "goes through x > 1, which carries no gradient" in r.why["x"]


@pytest.mark.parametrize("source,kind,words", [
    ("x[5]", "index", "index 5 is out of bounds for dimension 0 with size 3"),
    ("x[0, 1]", "index", "too many indices for tensor of dimension 1"),
    ("x.sum(dim=1)", "shape", "dim out of range at 'x.sum(dim=1)': its input has 1 dimension"),
    ("F.softmax(x, dim=2).sum()", "shape", "Dimension out of range"),
    ("torch.cat([x, x.reshape(3, 1)]).sum()", "shape", "shape mismatch"),
    ("x.reshape(2, 2).sum()", "shape", "the new shape must hold the 3 elements"),
    ("torch.stack([x, x]).t().view(-1).sum()", "shape", "cannot view"),
    ("F.cross_entropy(x.reshape(1, 3), t)", "index", "cross_entropy's target 7 is not a class index"),
])
def test_shape_and_index_mistakes_speak_torch(source, kind, words):
    with pytest.raises(EvalError) as info:
        explain(source, x=[1, 2, 3], **({"t": [7]} if "t)" in source else {}))
    assert info.value.kind == kind and words in info.value.message and info.value.hint
    assert info.value.span is not None


def test_class_indices_must_be_whole():
    with pytest.raises(EvalError, match="must be whole numbers"):
        explain("F.cross_entropy(x, t)", x=[[1, 2, 3]], t=[0.5])


def test_torch_warnings_are_reported_not_leaked():
    """torch warns when mse_loss broadcasts its target (found by fuzzing): a gradflow warning, no Python one."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = explain("F.mse_loss(x, y)", wrt="x", x=1, y=[1, 2])
    assert r.grad("x") == -1.0  # mean((1-1)^2, (1-2)^2): d/dx = ((1-1) + (1-2)) * 2 / 2
    (w,) = r.warnings
    assert w.kind == "torch_warning" and w.message.startswith("torch warns at 'F.mse_loss(x, y)': Using a target")


def test_numeric_check_of_a_boolean_output(cli):
    """A comparison as the output (found by fuzzing): --check used to subtract two booleans (internal error)."""
    res = cli("eval", "y = 0 - x == 7.", "--x", "1", "--check")
    assert res.exit_code == 3 and "internal error" not in res.stderr
    assert "goes through y, which carries no gradient" in res.stderr


def test_class_indices_say_why_they_get_no_gradient():
    r = explain("F.cross_entropy(x, t)", wrt="all", x=[1, 2, 3], t=2)
    assert r.grad("t") is None and r.why["t"] == ("t is the class indices of F.cross_entropy(x, t): whole numbers, "
                                                  "taken as integers, carry no gradient")
    r = explain("F.cross_entropy(x, p)", wrt="all", dtype="float64", x=[1, 2, 3], p=[0, 0, 1])  # probabilities
    assert r.grad("p") == pytest.approx((-np.log(np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())).tolist())
