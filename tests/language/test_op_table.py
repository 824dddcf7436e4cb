"""The op table is the single source of an op's meaning: every part of gradflow asks it what is a cut."""
import torch

from gradflow import explain
from gradflow.engine.forward import REGION_CONTEXTS
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


_SAMPLE = {"int": 0, "dims": (0,), "shape": (2,), "bool": True, "number": 0.5, "index": (0,)}


def test_every_op_has_a_torch_call():
    """Plain and cut rows compute through their own fn (the engine has no per-name branches for them), with
    their operands positionally and their other parameters by name."""
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    assert OPS["detach"].fn(t).requires_grad is False
    for name in REGION_OPS:
        assert OPS[name].fn(t) is t  # a region returns its argument; the engine enters the context
    for op in OPS.values():
        if op.kind == "flag":
            continue  # lowered to steps, never called by the engine
        operands = [t > 1 if p.name == "condition" else t for p in op.operands for _ in range(2 if p.kind ==
                    "tensors" else 1)]
        params = {p.name: p.choices[0] if p.kind == "str" else _SAMPLE[p.kind] for p in op.params
                  if p.kind not in ("tensor", "tensors")}
        target = {"cross_entropy": torch.tensor(1.0), "binary_cross_entropy_with_logits": torch.tensor([0.0, 1.0]),
                  "nll_loss": torch.tensor(1), "linear": torch.ones(3, 2)}
        if op.name in target:
            operands[1] = target[op.name]
        if op.name == "linear":  # weight 3×2 and its bias
            operands[2] = torch.ones(3)
        if op.name == "binary_cross_entropy":  # a probability and its target
            operands = [torch.tensor([0.25, 0.5], requires_grad=True), torch.tensor([0.0, 1.0])]
        assert op.fn(*operands, **params) is not None, op.name


def test_every_spelling_names_one_row():
    """A spelling belongs to one op; bare names, methods and torch.* names all come from the rows."""
    from gradflow.language.ops import FUNCTIONS, METHODS, QUALIFIED

    for table in (FUNCTIONS, METHODS, QUALIFIED):
        for spelling, op in table.items():
            assert any(spelling in s for s in op.spellings()), (spelling, op.name)
    assert QUALIFIED["torch.nn.functional.relu"] is OPS["relu"] and METHODS["detach_"] is OPS["detach"]


def test_a_new_cut_spelling_is_known_to_inspect():
    from gradflow.tracer.records import DETACH as _DETACH

    assert _DETACH == set(OPS["detach"].torch_names) == {"detach", "detach_", "data"}


def test_regions_and_cuts_follow_the_table_in_evaluation():
    """x = 3, y = 2: x*y inside no_grad carries no gradient; detach likewise; the plain product does."""
    assert explain("no_grad(x*y) + x", x=3, y=2).grad("x") == 1.0
    assert explain("detach(x*y) + x", x=3, y=2).grad("x") == 1.0
    assert explain("x*y + x", x=3, y=2).grad("x") == 3.0
