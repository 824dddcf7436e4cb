"""explain(..., brief=True): the answer only. Its document is exactly the full one less "nodes", "edges" and
"contributions", for every kind of program (the fast path, and the programs it hands to the full evaluation);
its numbers against hand-derived values and central finite differences (float64)."""
import math
import random

import pytest

from gradflow import explain
from gradflow.errors import GradflowError
from gradflow.values.jsonable import dumps

GRAPH_KEYS = ("nodes", "edges", "contributions")

# (program, values): plain, detach, no-gradient, vectors, regions, flags, retain_grad, nan/inf forward and
# backward (one masked by relu, so only an inner grad is inf), warnings of every kind, named outputs, many uses
CASES = [
    ("(x*y1 - detach(x*y2))^2", dict(x=1, y1=2, y2=7)),
    ("detach(x)*y", dict(x=1, y=2, wrt="x")),
    ("detach(x)*x", dict(x=3)),
    ("x*y + detach(y)", dict(x=1, y=2, wrt="all")),
    ("sum(tanh(x)*x + sigmoid(x))", dict(x=[0.5, -1.0])),
    ("mean(x*x*x*x + x)", dict(x=[0.25, -1.5, 2.0], dtype="float64")),
    ("loss = sum((w*x - t)^2)", dict(w=[1, 2], x=[3, 4], t=[1, 1], wrt="w,x")),
    ("a = no_grad(x*2); a*x", dict(x=2)),
    ("no_grad(x)*x*3", dict(x=2)),
    ("inference_mode(x)*y", dict(x=2, y=3, wrt="all")),
    ("x.requires_grad = false; x*y", dict(x=1, y=2, wrt="all")),
    ("h = x*y; h.retain_grad(); h*h", dict(x=1, y=2)),
    ("sqrt(relu(-x))", dict(x=1)),
    ("log(x)*y", dict(x=0, y=2, wrt="all")),
    ("exp(x)*0", dict(x=1000)),
    ("relu(-exp(x*1000))*y", dict(x=1, y=2, wrt="all")),
    ("x/y", dict(x=1, y=0, wrt="all")),
    ("x*y1", dict(x=1, y1=2, y2=7)),  # unused_value
    ("x*2", dict(x=0.1)),  # value_converted (0.1 rounds in float32)
    ("x*y", dict(x=3, y=2, dtype="float16")),
    ("sum(x*x)", dict(x=[60000.0, 1.0], dtype="float16")),
    ("(x > 0)*x", dict(x=1)),
    ("sum(x > 0)", dict(x=[1, -1])),
    ("x*sum(y)", dict(x=2, y=[1, 2], wrt="x")),
    ("z = x*x; z*z*z", dict(x=1.5, dtype="float64")),
    ("mse_loss(x, y)", dict(x=[1.0, 2.0], y=[[1.0, 2.0], [0.0, 1.0]])),  # torch warns (broadcasting)
]


def _doc(result) -> str:
    d = result.to_dict()
    return dumps({k: v for k, v in d.items() if k not in GRAPH_KEYS})


@pytest.mark.parametrize("source, values", CASES)
def test_brief_document_is_the_full_one_without_the_graph(source, values):
    full, brief = explain(source, **values), explain(source, brief=True, **values)
    assert _doc(brief) == _doc(full) and dumps(brief.to_dict()) == _doc(full)
    assert brief.brief and brief.nodes == [] and brief.edges == []
    assert not any(k in brief.to_dict() for k in GRAPH_KEYS)


@pytest.mark.parametrize("source, values", [
    ("x +* 2", dict(x=1)), ("sum(x)", dict()), ("x*y", dict(x=1, y=2, z=3, strict=True)),
    ("x", dict(x=[1.0, 2.0])),  # non-scalar output
    ("sum(x*2)", dict(x=[1.0] * 10, limits={"total": 40})),
    ("max(x) + max(x) + max(x)", dict(x=[1.0] * 10, limits={"total": 59})),  # each measured use counts
    ("x.requires_grad = true; x*2", dict(x=1, wrt="")),
    ("inference_mode(x*y)*y", dict(x=2, y=3, wrt="all")),  # torch refuses to save an inference tensor
])
def test_brief_raises_exactly_the_errors_of_the_full_evaluation(source, values):
    with pytest.raises(GradflowError) as full:
        explain(source, **values)
    with pytest.raises(GradflowError) as brief:
        explain(source, brief=True, **values)
    assert (brief.value.kind, brief.value.message, brief.value.hint, brief.value.exit_code) == \
        (full.value.kind, full.value.message, full.value.hint, full.value.exit_code)


def test_brief_values_against_hand_derivation():
    # L = (x*y1 - detach(x*y2))^2 at 1, 2, 7: L = (2 - 7)^2 = 25, dL/dx = 2*(2 - 7)*y1 = -20 (y2's term is cut)
    r = explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7, brief=True)
    assert (r.output.value.item(), r.grad("x")) == (25.0, -20.0)
    # sum(tanh(x)*x + sigmoid(x)): d/dx = tanh(x) + x*(1 - tanh(x)^2) + s(1 - s)
    xs = [0.5, -1.0]
    r = explain("sum(tanh(x)*x + sigmoid(x))", x=xs, dtype="float64", brief=True)
    s = [1 / (1 + math.exp(-v)) for v in xs]
    want = [math.tanh(v) + v * (1 - math.tanh(v) ** 2) + si * (1 - si) for v, si in zip(xs, s)]
    assert r.grad("x") == pytest.approx(want, rel=1e-12)
    # a detached leaf: no gradient, and why
    r = explain("detach(x)*y", x=1, y=2, wrt="x", brief=True)
    assert r.grads == {"x": None} and r.why == {"x": "every path from x to L is cut by detach(x)"}


def _program(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth == 0 or r < 0.25:
        return rng.choice(["x", "y", "x", "1.5", "2"])
    if r < 0.6:
        return f"({_program(rng, depth - 1)} {rng.choice('+-*')} {_program(rng, depth - 1)})"
    if r < 0.9:
        return f"{rng.choice(['tanh', 'sigmoid', 'sin', 'cos'])}({_program(rng, depth - 1)})"
    return f"({_program(rng, depth - 1)})^2"


def test_brief_grads_against_finite_differences():
    rng = random.Random(7)
    h = 1e-6
    for _ in range(40):
        source = f"({_program(rng, rng.randint(2, 5))}) * x"
        x, y = rng.uniform(-1.5, 1.5), rng.uniform(-1.5, 1.5)
        r = explain(source, x=x, y=y, wrt="all", dtype="float64", brief=True)
        for name, at in (("x", dict(x=x, y=y)), ("y", dict(x=x, y=y))):
            if "y" not in source and name == "y":
                continue
            up = explain(source, dtype="float64", brief=True, **{**at, name: at[name] + h}).output.value.item()
            down = explain(source, dtype="float64", brief=True, **{**at, name: at[name] - h}).output.value.item()
            assert r.grad(name) == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-6), (source, name)


def test_brief_random_programs_equal_the_full_documents():
    """Many uses of x and y (gradients summed from several edges): the brief run's sums are the full run's,
    to the last bit, in float32."""
    rng = random.Random(3)
    for _ in range(150):
        source = f"sum({_program(rng, rng.randint(2, 6))} * x)"
        values = dict(x=[rng.uniform(-2, 2) for _ in range(3)], y=rng.uniform(-2, 2), wrt="all")
        if "y" not in source:
            values.pop("y")
        assert dumps(explain(source, brief=True, **values).to_dict()) == _doc(explain(source, **values)), source


def test_the_fast_path_answers_plain_programs_alone(monkeypatch):
    """A plain program never reaches the full evaluation (no NodeResult per node is made)."""
    from gradflow.engine import evaluate

    def refuse(run):
        raise AssertionError("the full evaluation ran")

    monkeypatch.setattr(evaluate, "node_results", refuse)
    r = explain("sum(tanh(x)*x + sigmoid(x))", x=[0.5, -1.0], brief=True)
    assert r.brief and r.output.requires_grad and len(r.grads["x"]) == 2
    with pytest.raises(AssertionError, match="full evaluation"):
        explain("detach(x)*y", x=1, y=2, wrt="x", brief=True)  # no gradient: `why` needs the full evaluation


def test_the_finite_check_says_what_testing_each_tensor_says():
    """nonfinite.all_finite (brief's test: one flat sum of many tensors' numbers) == no tensor is bad() (tensor by
    tensor) == plain torch's isfinite over every floating tensor, for numbers, vectors, matrices, big tensors, ints and bools, nan, inf, -inf, inf + -inf and finite
    numbers whose sum overflows (float64's largest twice)."""
    import torch

    from gradflow.engine.nonfinite import all_finite as _finite
    from gradflow.engine.nonfinite import bad

    def torch_finite(groups) -> bool:
        return all(bool(torch.isfinite(t).all()) for g in groups for t in g if t is not None and t.is_floating_point())

    big = 1.7e308
    pool = [None, torch.tensor(1.5), torch.tensor(-2.0, dtype=torch.float64), torch.tensor([1.0, -3.0]),
            torch.ones(2, 3), torch.arange(100.0), torch.tensor(3), torch.tensor([1, 2]), torch.tensor(True),
            torch.tensor([True, False]), torch.tensor(big, dtype=torch.float64),
            torch.tensor([big, big], dtype=torch.float64)]
    for x in (math.nan, math.inf, -math.inf):
        pool += [torch.tensor(x), torch.tensor([1.0, x]), torch.tensor([[0.0], [x]]),
                 torch.cat([torch.arange(99.0), torch.tensor([x])])]
    rng = random.Random(5)
    for _ in range(400):
        groups = [rng.sample(pool, rng.randint(0, 4)) for _ in range(3)]
        assert _finite(*groups) == (not any(bad(t) for g in groups for t in g)) == torch_finite(groups), groups
    assert _finite([torch.tensor(math.inf)], [torch.tensor(-math.inf)]) is False  # their sum is nan
    assert _finite([torch.tensor(big, dtype=torch.float64)] * 2) is True  # their sum overflows; each is finite
