"""Aliases, in-place methods and regions against plain torch (tests/aliasgen.py writes each program twice).

torch decides: the same program as plain torch code, run by exec, gives x.grad and y.grad or refuses; gradflow
must give the same numbers, or refuse too.
"""
from __future__ import annotations

import math
import re

import pytest

from gradflow import explain
from gradflow.errors import GradflowError
from tests.aliasgen import AliasCase, alias_case, run_torch


def gradflow_grads(case) -> dict[str, float | None] | str:
    try:
        used = [name for name in ("x", "y") if re.search(rf"\b{name}\b", case.source)]
        result = explain(case.source, wrt=used, values={k: v for k, v in case.values.items() if k in used})
    except GradflowError:
        return "error"
    if result.error is not None:
        return "error"
    return {name: (None if g is None else float(g)) for name, g in result.grads.items()}


def same(ours, theirs) -> bool:
    if ours == "error" or theirs == "error":
        return ours == theirs
    for name in ("x", "y"):
        a, b = ours.get(name), theirs.get(name)
        if (a is None) != (b is None) or (a is not None and not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)):
            return False
    return True


HAND = [  # (gradflow program, the same in torch, x, x.grad derived by hand)
    ("a = x*1; b = a; b.detach_(); a*x", "a = x*1; b = a; b.detach_(); L = a*x", 2.0, 2.0),  # b *is* a
    ("a = x.clone(); b = a; b.detach_(); a*x", "a = x.clone(); b = a; b.detach_(); L = a*x", 2.0, 2.0),
    ("a = x*1; b = (a); b.detach_(); a*x", "a = x*1; b = (a); b.detach_(); L = a*x", 2.0, 2.0),
    ("a = x*1\nwith torch.no_grad():\n    b = a\nb.detach_()\na*x",
     "a = x*1\nwith torch.no_grad():\n    b = a\nb.detach_()\nL = a*x", 2.0, 2.0),
    ("a = x*1; b = no_grad(a); b.detach_(); a*x",  # no_grad(a) hands back a itself
     "a = x*1\nwith torch.no_grad():\n    b = a\nb.detach_()\nL = a*x", 2.0, 2.0),
    ("a = x*1; c = a + x; a.detach_(); c + a*x", "a = x*1; c = a + x; a.detach_(); L = c + a*x", 2.0, 4.0),
]


@pytest.mark.parametrize("source, torch_code, x, expected", HAND)
def test_detach_in_place_through_an_alias(source, torch_code, x, expected):
    case = AliasCase(source, torch_code, {"x": x, "y": 1.0})
    assert run_torch(case) == {"x": expected, "y": None}
    assert gradflow_grads(case)["x"] == expected


def test_detach_in_place_after_an_op_saved_the_tensor_is_refused_as_torch_does():
    case = AliasCase("a = x*1; c = a*x; a.detach_(); c + a*x", "a = x*1; c = a*x; a.detach_(); L = c + a*x",
                     {"x": 2.0, "y": 1.0})
    assert run_torch(case) == "error"  # "Trying to use a saved tensor that has been detached in-place"
    with pytest.raises(GradflowError, match="detached in-place") as err:
        explain(case.source, x=2.0)
    assert err.value.kind == "detached_in_place" and "a.detach()" in err.value.hint


# Found by bench/fuzz.py (inputs 68615 and 27765 of seed 11): the tensor detached in place was saved by an op
# whose backward only `L.backward()` runs (torch runs every node it can reach from L, not only those on a path
# to a tensor that still requires grad).
SAVED_BEHIND = [  # (gradflow program, the same in torch)
    ("n1 = 0.5*y\nn2 = inference_mode(sin(y))\ny.detach_()\nn3 = sin(n1)\nn4 = 2.0 - 1.0\nn1.detach_()\n"
     "n4*x + y*x + n3*x",
     "n1 = 0.5*y\nwith torch.inference_mode():\n    n2 = torch.sin(y)\ny.detach_()\nn3 = torch.sin(n1)\n"
     "n4 = 2.0 - 1.0\nn1.detach_()\nL = n4*x + y*x + n3*x"),
    ("n1 = 0.5 + x\nn2 = y.clone()\nwith torch.inference_mode():\n    n3 = y\nn4 = n2*y\ny.detach_()\n"
     "n2.detach_()\nn3*x + y*x + n4*x",
     "n1 = 0.5 + x\nn2 = y.clone()\nwith torch.inference_mode():\n    n3 = y\nn4 = n2*y\ny.detach_()\n"
     "n2.detach_()\nL = n3*x + y*x + n4*x"),
]


@pytest.mark.parametrize("source, torch_code", SAVED_BEHIND)
def test_a_tensor_saved_behind_a_detached_one_is_refused_as_torch_does(source, torch_code):
    case = AliasCase(source, torch_code, {"x": 2.0, "y": 1.0})
    assert run_torch(case) == "error"  # "Trying to use a saved tensor that has been detached in-place"
    assert gradflow_grads(case) == "error"


@pytest.mark.parametrize("source", ["a = no_grad(x); a.detach_(); a*x", "a = inference_mode(x); a.detach_(); a*x"])
def test_a_region_around_a_leaf_hands_the_leaf_back(source):
    """torch: x itself is detached, so nothing requires grad and backward fails (exit 3 on the CLI)."""
    result = explain(source, x=2.0)
    assert result.error is not None and "requires_grad was set to false" in result.error.message


@pytest.mark.parametrize("source", ["inference_mode(2.0 - 1.0)*y", "inference_mode(2.0)*y",
                                    "with torch.inference_mode():\n    c = 2.0 - 1.0\nc*y"])
def test_inference_tensors_made_from_constants_cannot_be_saved(source):
    with pytest.raises(GradflowError, match="Inference tensors cannot be saved for backward"):
        explain(source, y=1.0)


@pytest.mark.parametrize("seed", range(300))
def test_generated_alias_programs_match_plain_torch(seed):
    case = alias_case(seed)
    ours, theirs = gradflow_grads(case), run_torch(case)
    assert same(ours, theirs), f"\n{case.source}\n---\n{case.torch_code}\nvalues {case.values}: {ours} vs {theirs}"
