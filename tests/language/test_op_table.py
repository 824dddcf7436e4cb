"""The op table is the single source of an op's meaning: every part of gradflow asks it what is a cut."""
import torch

from gradflow import explain
from gradflow.engine.evaluate import REGION_CONTEXTS
from gradflow.language.ops import CUT_OPS, OPS, REGION_OPS, is_cut, is_region, role


def test_roles():
    assert [name for name in OPS if role(name) == "cut"] == ["detach"]
    assert list(REGION_OPS) == ["no_grad", "inference_mode"]
    assert CUT_OPS == ("detach", "no_grad", "inference_mode")
    assert is_cut("no_grad") and is_region("no_grad") and not is_region("detach") and is_cut("detach")
    assert role("var") == role("const") == role("mul") == "plain" and not is_cut("mul")


def test_every_region_has_a_torch_context_and_nothing_else_does():
    assert set(REGION_CONTEXTS) == set(REGION_OPS)
    for name in REGION_OPS:
        with REGION_CONTEXTS[name]():
            assert not torch.is_grad_enabled()


def test_every_op_has_a_torch_call():
    """Plain and cut rows compute through their own fn (the engine has no per-name branches for them)."""
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    assert OPS["detach"].fn(t).requires_grad is False
    for name in REGION_OPS:
        assert OPS[name].fn(t) is t  # a region returns its argument; the engine enters the context
    for op in OPS.values():
        args = [t] * op.min_args
        assert op.fn(*args) is not None, op.name


def test_a_new_cut_spelling_is_known_to_inspect():
    from gradflow.inspect.tracer import _DETACH

    assert _DETACH == set(OPS["detach"].torch_names) == {"detach", "detach_", "data"}


def test_regions_and_cuts_follow_the_table_in_evaluation():
    """x = 3, y = 2: x*y inside no_grad carries no gradient; detach likewise; the plain product does."""
    assert explain("no_grad(x*y) + x", x=3, y=2).grad("x") == 1.0
    assert explain("detach(x*y) + x", x=3, y=2).grad("x") == 1.0
    assert explain("x*y + x", x=3, y=2).grad("x") == 3.0
