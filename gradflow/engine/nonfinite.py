"""Readable anomaly mode: where a nan or inf first appeared, forward and backward.

Forward: the first node in evaluation order whose value is non-finite while
all its inputs are finite. Backward: the first edge, in backward order, whose
gradient is non-finite while the gradient arriving at its consumer is finite
(that consumer's local derivative made it). Torch-free: tensor methods only.
"""
from __future__ import annotations

import math

from gradflow.analysis.explanation import EdgeResult, NodeResult, Warning
from gradflow.values.jsonable import PLAIN_MAX, plain_finite

LARGEST = {"float16": "65504", "bfloat16": "3.4e38", "float32": "3.4e38", "float64": "1.8e308"}
HALF_NAMES = ("float16", "bfloat16")


def dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _half_note(t) -> str:
    """` (float16's largest number is 65504)` for a half-precision tensor, '' otherwise."""
    name = dtype_name(t)
    return f" ({name}'s largest number is {LARGEST[name]})" if name in HALF_NAMES else ""


def bad(t) -> bool:
    """Does t hold a nan or inf? Its sum is finite exactly when no element is non-finite, unless finite elements
    overflow the sum: only then are the elements tested one by one. At most one torch op, not two: this runs on
    every value, grad and flow of every evaluation."""
    if t is None or not t.is_floating_point():
        return False
    numbers = _small_numbers(t)
    if numbers is not None:
        return not _finite_numbers(numbers)
    return not math.isfinite(t.sum().item()) and not bool(t.isfinite().all())


def all_finite(*groups) -> bool:
    """No nan or inf in any tensor of these groups (None: no tensor): as `bad`, but the numbers of every small
    tensor go into one sum, so a brief answer (engine/brief.py), which tests every value, grad and flow of a small
    program, makes one test of them all; a bigger tensor is tested on its own."""
    numbers: list = []
    for tensors in groups:
        for t in tensors:
            if t is None or not t.is_floating_point():
                continue
            small = _small_numbers(t)
            if small is not None:
                numbers.extend(small)
            elif bad(t):
                return False
    return _finite_numbers(numbers)


def _small_numbers(t) -> list | None:
    """A single number's or a short vector's numbers, read into Python (cheaper than a torch op); None for a
    bigger tensor, or one of more dimensions."""
    n = t.numel()
    if n == 1:
        return [t.item()]
    return t.tolist() if n <= PLAIN_MAX and t.dim() == 1 else None


def _finite_numbers(numbers: list) -> bool:
    return math.isfinite(sum(numbers)) or all(map(math.isfinite, numbers))


def _is_bad(t, numbers, known: dict[int, bool]) -> bool:
    """bad(t), from its numbers when the engine read them (values/jsonable.py `plain`), else asked once per tensor
    (`known`: many flows are their source's grad tensor itself)."""
    finite = plain_finite(numbers)
    if finite is not None:
        return not finite
    if id(t) not in known:
        known[id(t)] = bad(t)
    return known[id(t)]


def what(t) -> str:
    """'nan', 'inf', '-inf' or a mix, for messages."""
    kinds = [k for k, hit in (("nan", t.isnan()), ("inf", t.isposinf()), ("-inf", t.isneginf()))
             if bool(hit.any())]
    return "/".join(kinds)


def _low(t) -> float:
    return t.detach().double().min().item()


def _has_zero(t) -> bool:
    return bool((t == 0).any())


def forward_reason(n: NodeResult, args: list[NodeResult], given=None) -> str:
    """Why this op made a non-finite value out of finite inputs (`given`: a variable's value as given)."""
    if n.op == "var":
        return _var_reason(n, given)
    if n.op == "const" and dtype_name(n.value) in HALF_NAMES:
        return f"the number {n.expr} does not fit in {dtype_name(n.value)}{_half_note(n.value)}"
    if n.op == "const":
        return f"the number {n.expr} does not fit in the dtype (its largest value is about 3.4e38 in float32)"
    a = args[0].value
    if n.op == "div" and _has_zero(args[1].value):
        divisor = "" if args[1].op == "const" else f" {args[1].name}"
        return f"division by zero: the divisor{divisor} is 0" + (" (0/0 is nan)" if _has_zero(a) else "")
    if n.op == "log" and _low(a) <= 0:
        return "log of a negative number is nan" if _low(a) < 0 else "log(0) is -inf"
    if n.op == "sqrt" and _low(a) < 0:
        return "sqrt of a negative number is nan"
    if n.op == "pow" and _has_zero(a) and _low(args[1].value) < 0:
        return "0 to a negative power divides by zero"
    if n.op == "pow" and _low(a) < 0 and "nan" in what(n.value):
        return "a negative number to a non-integer power is nan"
    if "inf" in what(n.value) and dtype_name(n.value) in HALF_NAMES:
        return f"overflow: the result is too large for {dtype_name(n.value)}{_half_note(n.value)}"
    if "inf" in what(n.value):
        return "overflow: the result is too large for the dtype (float32 stops near 3.4e38, float64 near 1.8e308)"
    return f"{n.op} is undefined at these inputs"


FLOAT64_INTS = 2**1024  # an int this large or larger has no float64: it is read as ±inf


def _finite_list(n: NodeResult, given: list) -> bool:
    try:
        return not bad(n.value.double().new_tensor(given))
    except (OverflowError, RuntimeError):  # an int beyond float64's range: read as ±inf
        return False


def _var_reason(n: NodeResult, given) -> str:
    """A value given as inf/nan says so; finite numbers that the dtype cannot hold (1e39 in float32) say that."""
    if type(given) is int and not -FLOAT64_INTS < given < FLOAT64_INTS:
        return f"the value given for {n.name} is an integer beyond float64's range (about 1.8e308), so it is " \
               f"{what(n.value)}"
    finite = (type(given) in (int, float) and math.isfinite(given)) or (
        isinstance(given, list) and _finite_list(n, given))
    if not finite:
        return f"the value given for {n.name} is {what(n.value)}"
    dtype = dtype_name(n.value)
    which = f"a number given for {n.name}" if isinstance(given, list) else f"the value given for {n.name}, {given:g},"
    largest = LARGEST.get(dtype, "its maximum")
    return (f"{which} is too large for {dtype} (its largest number is about {largest}), so it became "
            f"{what(n.value)}; use --dtype float64 (in Python: dtype='float64')")


def backward_reason(e: EdgeResult, dst: NodeResult, args: list[NodeResult]) -> str:
    """Why the local derivative of `dst` with respect to its input `e.pos` is not finite."""
    src = args[e.pos]
    v = src.value
    if dst.op == "sqrt" and _has_zero(v):
        return f"d sqrt(a)/da = 1/(2·sqrt(a)) is inf at a = {src.name} = 0"
    if dst.op == "log" and _has_zero(v):
        return f"d log(a)/da = 1/a is inf at a = {src.name} = 0"
    if dst.op == "div" and _has_zero(args[1].value):
        return f"the divisor {args[1].name} is 0, so the derivative of a/b (1/b or -a/b²) is not finite"
    if dst.op == "pow" and e.pos == 0:
        return "d a^b/da = b·a^(b-1) is not finite here (a = 0 with b < 1, or overflow)"
    if dst.op == "pow":
        return "d a^b/db = a^b·log(a) is not finite here (a ≤ 0, or overflow)"
    if bad(v) or bad(dst.value):
        return "the forward value here is already non-finite"
    return "overflow: the incoming gradient times the local derivative is too large for the dtype" + _half_note(v)


def _zero_times_inf(e: EdgeResult, dst: NodeResult) -> str:
    if "nan" in what(e.flow) and dst.grad is not None and _has_zero(dst.grad):
        return f"; the gradient arriving at {dst.name} is 0, and 0·inf is nan"
    return ""


def find_nonfinite(nodes: list[NodeResult], edges: list[EdgeResult], backward_ran: bool,
                   given: dict | None = None) -> list[Warning]:
    """`given`: the values as given, by variable name (to tell 1e39 that float32 cannot hold from an inf)."""
    out = []
    known: dict[int, bool] = {}
    value_bad = [_is_bad(n.value, n.value_py, known) for n in nodes]  # nodes[i].id == i; args are such indices
    for n in nodes:
        if value_bad[n.id] and not any(value_bad[a] for a in n.args):
            args = [nodes[a] for a in n.args]
            out.append(Warning("nonfinite_value", n.name, f"{what(n.value)} first appears in the forward pass "
                               f"at '{n.name}': {forward_reason(n, args, (given or {}).get(n.name))}", n.id))
            break
    if backward_ran:
        out += _backward(nodes, edges, known)
    return out


def _backward(nodes: list[NodeResult], edges: list[EdgeResult], known: dict[int, bool]) -> list[Warning]:
    for e in sorted(edges, key=lambda e: -e.dst):
        dst, src = nodes[e.dst], nodes[e.src]
        if _is_bad(e.flow, e.flow_py, known) and not _is_bad(dst.grad, dst.grad_py, known):
            return [Warning("nonfinite_grad", dst.name,
                            f"the gradient first becomes {what(e.flow)} in the backward pass on the edge "
                            f"{src.name} → {dst.name}: {backward_reason(e, dst, [nodes[a] for a in dst.args])}"
                            + _zero_times_inf(e, dst), dst.id)]
    for n in reversed(nodes):
        if _is_bad(n.grad, n.grad_py, known):
            return [Warning("nonfinite_grad", n.name, f"the gradient of '{n.name}' is {what(n.grad)}: "
                            "the sum of the gradients flowing into it overflows", n.id)]
    return []
