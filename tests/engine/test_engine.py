"""Engine semantics, hand-derived: requires_grad statements, cuts, reasons, vectors, edges."""
import pytest
import torch

from gradflow import EvalError, ValueInputError, explain


def test_setflag_true_on_leaf():
    r = explain("y.requires_grad = true; x*y", x=2, y=3)
    assert r.grads == {"x": pytest.approx(3.0)}
    assert r.node("y").grad.item() == 2.0  # y now requires grad: dL/dy = x
    assert r.warnings == []


def test_setflag_false_on_chosen_leaf_gives_none_with_reason():
    r = explain("x.requires_grad = false; x*y", x=2, y=3, wrt="x,y")
    assert r.grad("x") is None and r.grad("y") == 2.0
    assert r.why["x"] == "x.requires_grad was set to false by `x.requires_grad = false`"
    assert r.error is None


def test_setflag_on_computed_node_is_torchs_error():
    with pytest.raises(EvalError) as info:
        explain("z = x*y; z.requires_grad = false; z", x=2, y=3)
    e = info.value
    assert e.kind == "requires_grad_non_leaf" and e.exit_code == 2
    assert "you can only change requires_grad flags of leaf variables" in e.message
    assert "cannot set requires_grad on 'z': it is computed (x*y), not a leaf" in e.message
    assert "detach(z)" in e.hint
    assert e.source[e.span.start:e.span.end] == "z.requires_grad = false"


def test_setflag_true_without_path_warns_and_backward_runs():
    r = explain("c = detach(x*y); c.requires_grad = true; c*2", x=2, y=3)
    assert r.error is None
    assert r.node("c").grad.item() == 2.0
    assert r.grad("x") is None and r.why["x"] == "every path from x to L is cut by c"
    (w,) = r.warnings
    assert w.kind == "requires_grad_no_path"
    assert "makes backward run" in w.message and "no chosen leaf receives a gradient" in w.message


def test_setflag_true_without_path_when_others_flow():
    r = explain("c = detach(x*y); c.requires_grad = true; c*2 + x", x=2, y=3)
    assert r.grad("x") == 1.0
    assert "no gradient reaches them through c" in r.warnings[0].message


def test_no_grad_of_a_leaf_is_identity_with_warning():
    r = explain("no_grad(x)*y", x=2, y=3)
    assert r.grad("x") == 3.0  # gradient still flows, as in torch
    (w,) = r.warnings
    assert w.kind == "identity_cut" and "detach(x)" in w.message and "gradient still flows" in w.message


def test_no_grad_of_an_operation_cuts():
    r = explain("no_grad(x*y)*x", x=2, y=3)
    assert r.grad("x") == 6.0  # d/dx (c*x) with c = x*y = 6 held constant
    assert r.node("x*y").requires_grad is False and r.node("x*y").status == "cut"
    assert r.warnings == []


def test_inference_mode_saved_for_backward_is_explained():
    with pytest.raises(EvalError) as info:
        explain("inference_mode(x*y)*x", x=2, y=3)
    e = info.value
    assert e.kind == "inference_tensor" and e.exit_code == 2
    assert "Inference tensors cannot be saved for backward" in e.message  # torch's own words
    assert "no_grad()" in e.hint


def test_inference_mode_added_is_fine():
    r = explain("inference_mode(x*y) - x", x=2, y=3)
    assert r.output.value.item() == 4.0 and r.grad("x") == -1.0


def test_one_leaf_cut_others_live_exit_zero():
    r = explain("x*y + 0*detach(z)", x=2, y=3, z=4, wrt="all")
    assert r.error is None
    assert r.grad("x") == 3.0 and r.grad("y") == 2.0 and r.grad("z") is None
    assert r.why == {"z": "every path from z to L is cut by detach(z)"}


def test_leaf_unused_by_output():
    r = explain("u = z*2; x*y", x=2, y=3, z=4, wrt="x,z")
    assert r.grad("z") is None and r.why["z"] == "z is not used in computing L"
    assert r.node("u").status == "unused"


def test_both_cut_is_no_gradient_with_reason():
    r = explain("(detach(x*y1) - detach(x*y2))^2", x=1, y1=2, y2=7)
    assert r.error.kind == "no_gradient" and r.error.exit_code == 3
    assert "element 0 of tensors does not require grad" in r.error.message
    assert "every path from x to L is cut by detach(x*y1) and detach(x*y2)" in r.error.message


@pytest.mark.parametrize("text,wrt,want", [
    ("x*y", None, ["x"]), ("a*b", None, ["a", "b"]), ("x*y", "all", ["x", "y"]),
    ("x*y", "y", ["y"]), ("x*y", "y, x", ["y", "x"]), ("x*y", ["y"], ["y"]),
])
def test_wrt(text, wrt, want):
    vals = {n: 2.0 for n in "xyab" if n in text}
    assert list(explain(text, wrt=wrt, **vals).grads) == want


def test_wrt_unknown_suggests():
    with pytest.raises(ValueInputError) as info:
        explain("x*yy", x=1, yy=2, wrt="y")
    assert info.value.message == "--wrt names 'y', which the program does not use"
    assert info.value.hint == "did you mean 'yy'? the program's variables are: x, yy"


def test_wrt_computed_node_is_refused():
    with pytest.raises(ValueInputError) as info:
        explain("u = x*y; u^2", x=1, y=2, wrt="u")
    assert info.value.kind == "not_a_leaf"
    assert info.value.message == "--wrt names 'u', which is computed, not an input variable"
    assert explain("2*3", wrt="all").grads == {}


def test_vector_leaves():
    r = explain("sum(w*x) + mean(x)", x=[1, 2], w=[3, 4], wrt="all")
    assert r.grad("w") == [1.0, 2.0]
    assert r.grad("x") == [3.5, 4.5]  # w + 1/2
    assert r.output.value.item() == 12.5


def test_matrix_matmul():
    r = explain("sum(A @ v)", A=[[1, 2], [3, 4]], v=[5, 6], wrt="all")
    assert r.output.value.item() == 17 + 39
    assert r.grad("v") == [4.0, 6.0]  # column sums of A
    assert r.grad("A") == [[5.0, 6.0], [5.0, 6.0]]


def test_min_max_one_and_two_args():
    r = explain("max(x) + sum(min(x, y))", x=[1, 5, 3], y=2, wrt="all")
    assert r.grad("x") == [1.0, 1.0, 0.0]  # argmax is 5; the elementwise min picks x only at 1
    assert r.grad("y") == 2.0  # ... and y twice
    assert r.output.value.item() == 5 + 1 + 2 + 2


def test_edges_carry_each_use():
    r = explain("x*x", x=3)
    flows = [e.flow.item() for e in r.edges if r.nodes[e.src].name == "x"]
    assert flows == [3.0, 3.0] and r.grad("x") == 6.0


def test_blog_statuses():
    r = explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7)
    status = {n.name: n.status for n in r.nodes}
    assert status == {"x": "live", "y1": "off", "x*y1": "live", "y2": "off", "x*y2": "cut",
                      "detach(x*y2)": "cut", "x*y1 - detach(x*y2)": "live", "2": "off",
                      "(x*y1 - detach(x*y2))^2": "live"}
    assert r.node("x*y2").grad_fn == "MulBackward0" and r.node("x*y1 - detach(x*y2)").grad.item() == -10


def test_dtype():
    assert explain("x*1", x=1).output.value.dtype == torch.float32
    assert explain("x*1", x=1, dtype="float64").output.value.dtype == torch.float64
    assert explain("x*1", x=1, dtype="float16").output.value.dtype == torch.float16
    assert explain("x*1", x=1, dtype="bfloat16").output.value.dtype == torch.bfloat16
    with pytest.raises(EvalError, match="unknown dtype 'int32'"):
        explain("x", x=1, dtype="int32")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_absent_device():
    with pytest.raises(EvalError) as info:
        explain("x", x=1, device="cuda")
    assert info.value.message == "device 'cuda' is not available on this machine"
    with pytest.raises(EvalError, match="unknown device 'tpu'"):
        explain("x", x=1, device="tpu")


def test_non_scalar_output():
    with pytest.raises(EvalError) as info:
        explain("x*2", x=[1, 2])
    assert info.value.kind == "non_scalar"
    assert info.value.message == "the output 'x*2' has shape (2,); backward needs a single number"
    assert info.value.hint == "wrap it in sum(...) or mean(...), e.g. sum(x*2)"


def test_shape_mismatch_names_node_and_shapes():
    with pytest.raises(EvalError) as info:
        explain("sum(x*y)", x=[1, 2], y=[1, 2, 3])
    e = info.value
    assert e.kind == "shape"
    assert e.message.startswith("shape mismatch at 'x*y': mul of shapes (2,) and (3,).")
    assert e.source[e.span.start:e.span.end] == "x*y"


def test_value_errors():
    with pytest.raises(ValueInputError) as info:
        explain("x*y", x=1)
    assert (info.value.kind, info.value.message) == ("missing_value", "no value for variable 'y'")
    assert "--y VALUE" in info.value.hint
    with pytest.raises(ValueInputError, match="which the program does not use"):
        explain("x", x=1, z=2, strict=True)
    with pytest.raises(ValueInputError, match="cannot read the value of 'x': 'abc'"):
        explain("x", x="abc")


def test_values_for_names_that_clash_with_parameters():
    r = explain("wrt*x + dtype", x=2, values={"wrt": 3, "dtype": 1})
    assert r.grad("x") == 3.0


def test_nested_identity_wrappers_cut_nothing():
    # no_grad(no_grad(x)) runs no operation at all: torch hands back x itself, so d(3x)/dx = 3 flows
    r = explain("no_grad(no_grad(x))*3", x=2)
    assert r.grad("x") == 3.0
    assert not any(e.cut for e in r.edges)
    assert all(n.status in ("live", "off") for n in r.nodes)
    assert r.node("no_grad(x)").grad.item() == 3.0
    assert sum(w.kind == "identity_cut" for w in r.warnings) >= 1
