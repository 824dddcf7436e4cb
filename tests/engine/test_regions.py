"""Nested cuts follow torch exactly: every region a node sits in is entered, outermost first.

The oracle is torch itself, run by hand-written code (contexts entered with `with`, detach() called), not
gradflow's engine: x = 2, y = 3 in float64. Where torch answers, gradflow gives the same x.grad; where torch
refuses (an inference tensor saved for backward), gradflow raises its inference_tensor error; where nothing
requires grad, both say so.
"""
import itertools

import pytest
import torch

from gradflow import EvalError, explain
from gradflow.language.compile import compile_program

CUTS = ("no_grad", "inference_mode", "detach")
CONTEXTS = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


def _apply(kind: str, compute):
    if kind == "detach":
        value = compute()
        return value.detach() if torch.is_tensor(value) else value  # a number has nothing to detach
    with CONTEXTS[kind]():
        return compute()


def _combine(how: str, t, x):
    return {"*": lambda: t * x, "+": lambda: t + x, "exp": lambda: (t * x).exp()}[how]()


def torch_reference(outer: str, inner: str, how: str, inner_expr: str):
    """('ok', x.grad) | ('no_gradient', None) | ('inference_tensor', None), from plain torch code."""
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(3.0, dtype=torch.float64)
    body = {"x*y": lambda: x * y, "x*(y+x)": lambda: x * (y + x)}[inner_expr]
    try:
        L = _combine(how, _apply(outer, lambda: _apply(inner, body)), x)
    except RuntimeError as err:
        assert "Inference tensors cannot be saved for backward" in str(err)
        return ("inference_tensor", None)
    if not L.requires_grad:
        return ("no_gradient", None)
    L.backward()
    return ("ok", x.grad.item())


def gradflow_answer(source: str):
    used = compile_program(source).inputs
    try:
        result = explain(source, values={k: v for k, v in {"x": 2, "y": 3}.items() if k in used}, dtype="float64")
    except EvalError as err:
        return (err.kind, None)
    if result.error is not None:
        return (result.error.kind, None)
    return ("ok", result.grad("x"))


CASES = [(o, i, how, e) for o, i in itertools.product(CUTS, repeat=2) for how in ("*", "+", "exp")
         for e in ("x*y", "x*(y+x)")]


@pytest.mark.parametrize("outer,inner,how,inner_expr", CASES)
def test_nested_cuts_match_torch(outer, inner, how, inner_expr):
    t = f"{outer}({inner}({inner_expr}))"
    source = {"*": f"{t}*x", "+": f"{t} + x", "exp": f"exp({t}*x)"}[how]
    assert gradflow_answer(source) == pytest.approx(torch_reference(outer, inner, how, inner_expr)), source


def test_the_reported_case():
    """inference_mode(no_grad(x*y))*x: no_grad does not leave inference mode, so torch refuses."""
    with pytest.raises(EvalError) as err:
        explain("inference_mode(no_grad(x*y))*x", x=2, y=3)
    assert err.value.kind == "inference_tensor"
    assert explain("no_grad(inference_mode(x*y)) + x", x=2, y=3).grad("x") == 1.0  # + saves nothing: fine


def test_three_levels_and_a_region_around_a_cut_free_part():
    """no_grad(x * inference_mode(y*x)): the inner product is an inference tensor, the outer * runs under
    no_grad only (saving nothing): L = that + x*x has dL/dx = 2x = 4."""
    assert gradflow_answer("no_grad(x * inference_mode(y*x)) + x*x") == ("ok", 4.0)
    assert gradflow_answer("no_grad(no_grad(inference_mode(x*y)))*x") == ("inference_tensor", None)


def block_program(outer: str, inner: str, how: str, inner_expr: str) -> str:
    """The same nesting as PyTorch code writes it: `with torch.no_grad():` blocks for the contexts, methods
    for detach (a block's assignments are computed under it; what follows the block is not)."""
    lines, indent = [], ""
    for kind in (outer, inner):
        if kind in CONTEXTS:
            lines.append(f"{indent}with torch.{kind}():")
            indent += "    "
    inside = ".detach()" if inner == "detach" else ""
    inside += ".detach()" if outer == "detach" and inner == "detach" else ""
    lines.append(f"{indent}t = ({inner_expr}){inside}")
    if outer == "detach" and inner in CONTEXTS:
        lines.append("t = t.detach()")  # after the block: detach() outside the inner context
    lines.append({"*": "t*x", "+": "t + x", "exp": "(t*x).exp()"}[how])
    return "\n".join(lines)


@pytest.mark.parametrize("outer,inner,how,inner_expr", CASES)
def test_nested_with_blocks_match_torch(outer, inner, how, inner_expr):
    source = block_program(outer, inner, how, inner_expr)
    assert gradflow_answer(source) == pytest.approx(torch_reference(outer, inner, how, inner_expr)), source


def test_block_nodes_enter_every_enclosing_region_outermost_first():
    from gradflow.language.compile import compile_program

    g = compile_program("with torch.no_grad():\n    with torch.inference_mode():\n        a = x*y\n"
                        "    b = no_grad(a*x)\nc = b + x")
    modes = {n.text: n.modes for n in g.nodes if n.op != "var"}
    assert modes == {"x*y": ("no_grad", "inference_mode"), "a*x": ("no_grad", "no_grad"),
                     "no_grad(a*x)": ("no_grad",), "b + x": ()}
    assert [n.block for n in g.nodes if n.op != "var"] == ["`with torch.inference_mode():` on line 2", None,
                                                          "`with torch.no_grad():` on line 1", None]


def test_deeply_nested_blocks_are_limited_then_run_without_recursion():
    n = 1200
    src = "".join(" " * i + "with torch.no_grad():\n" for i in range(n)) + " " * n + "c = x*2\nc*x"
    with pytest.raises(Exception) as info:
        explain(src, x=2, limits={"length": 10**7})
    assert info.value.kind == "limit_depth" and "the `with` blocks nest 501 levels" in info.value.message
    r = explain(src, x=2, limits={"depth": 2000, "length": 10**7})  # every context entered: c is a constant
    assert r.grad("x") == 4.0 and len(r.graph.nodes[2].modes) == n


# ---- random nestings, against an evaluator written directly in torch ----------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

leaves = st.sampled_from(["x", "y", "2"])


def _tree(children):
    return st.one_of(st.tuples(st.sampled_from(["*", "+", "-"]), children, children),
                     st.tuples(st.sampled_from(CUTS), children))


trees = st.recursive(leaves, _tree, max_leaves=8)


def text(t) -> str:
    if isinstance(t, str):
        return t
    if len(t) == 2:
        return f"{t[0]}({text(t[1])})"
    return f"({text(t[1])} {t[0]} {text(t[2])})"


def torch_eval(t, env):
    """The tree evaluated by plain torch code: contexts entered with `with`, detach() called; a number is a
    tensor made where it is written (under inference_mode, an inference tensor)."""
    if t == "2":
        return torch.tensor(2.0, dtype=torch.float64)
    if isinstance(t, str):
        return env[t]
    if len(t) == 2:
        return _apply(t[0], lambda: torch_eval(t[1], env))
    a, b = torch_eval(t[1], env), torch_eval(t[2], env)
    return {"*": lambda: a * b, "+": lambda: a + b, "-": lambda: a - b}[t[0]]()


def torch_outcome(t):
    env = {"x": torch.tensor(2.0, dtype=torch.float64, requires_grad=True),
           "y": torch.tensor(3.0, dtype=torch.float64)}
    try:
        L = torch_eval(("*", t, "x"), env)
    except RuntimeError as err:
        assert "Inference tensors cannot be saved for backward" in str(err)
        return ("inference_tensor", None)
    if not torch.is_tensor(L) or not L.requires_grad:
        return ("no_gradient", None)
    L.backward()
    return ("ok", env["x"].grad.item())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(trees)
def test_random_nestings_match_torch(t):
    assert gradflow_answer(f"{text(t)} * x") == pytest.approx(torch_outcome(t)), text(t)
