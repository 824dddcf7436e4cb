"""Class 7 of the failures gradflow explains (tracer/failures.py): a call whose backward cannot run as written.

- no_derivative: an op torch has no derivative for, for one of its arguments ("the derivative for 'igamma:
  input' is not implemented"): the op, its line (the failure log's record of the forward) and the argument as the
  line spells it;
- function_grads: a custom autograd.Function whose backward returns the wrong number of gradients, or one of the
  wrong shape ("function ScaleBackward returned an incorrect number of gradients (expected 2, got 1)"): the
  Function, the line that applied it, and forward's argument the gradient belongs to.
"""
from __future__ import annotations

import ast
import inspect
import linecache
import re

from gradflow.tracer.failure_log import FailureLog
from gradflow.tracer.failure_words import BackwardFailure, source_of
from gradflow.tracer.teardown import graph_nodes

_NO_DERIVATIVE = r"the derivative for '(\w+)(?:: (\w+))?' is not implemented"
_COUNT = r"unction (\w+)Backward returned an incorrect number of gradients \(expected (\d+), got (\d+)\)"
_SHAPE = r"unction (\w+)Backward returned an invalid gradient at index (\d+) - got \[([\d, ]*)\] but expected " \
         r"shape compatible with \[([\d, ]*)\]"
WORDS = (_NO_DERIVATIVE, _COUNT, _SHAPE)  # torch's words for the errors this module explains
_ALIASES = {"igamma": {"gammainc"}, "igammac": {"gammaincc"}, "zeta": {"zeta"}}  # torch.special's names
_POSITION = {"self": 0, "input": 0, "other": 1}  # torch's names of an op's first arguments


def no_derivative(log: FailureLog, message: str) -> BackwardFailure | None:
    m = re.search(_NO_DERIVATIVE, message)
    if m is None:
        return None
    aten, argument = m.group(1), m.group(2)
    names = {aten, *_ALIASES.get(aten, ())}
    op = next((o for o in reversed(log.ops) if o.name.removeprefix("special_") in names), None)
    line = op.line if op is not None else None
    spelled = _argument_at(line, names, _POSITION.get(argument or "", -1)) or argument
    name = op.name.replace("special_", "special.", 1) if op is not None else aten  # as the user called it
    call = {"op": name, "line": line, "argument": spelled}
    t = f"`{spelled}`" if spelled else "that argument"
    fix = (f"torch has no gradient of `{name}` with respect to {t}: if it is a constant, make it one "
           f"(`{spelled or 'x'}.detach()`); else compute it with ops that have derivatives, or wrap it in an "
           "autograd.Function with your own backward")
    return BackwardFailure("no_derivative", spelled, fix, call=call, message=message)


def _argument_at(line: str | None, names: set[str], index: int) -> str | None:
    """The text of the call's argument at `index` on that line (`a` in `torch.igamma(a, x)`)."""
    call = call_on(line, lambda f: f in names or f.removeprefix("special_") in names)
    if call is None or not 0 <= index < len(call.args):
        return None
    return ast.unparse(call.args[index])


def call_on(line: str | None, wanted) -> ast.Call | None:
    """The first call on that line whose function's name `wanted` accepts."""
    try:
        tree = ast.parse(source_of(line))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if wanted(name):
                return node
    return None


def function_grads(log: FailureLog, message: str, files: list[str]) -> BackwardFailure | None:
    """A custom Function's backward returned too many or too few gradients, or one of the wrong shape. `files`:
    the user's files to look for the line that applied it (`Scale.apply(`)."""
    found = re.search(_COUNT, message) or re.search(_SHAPE, message)
    if found is None:
        return None
    name = found.group(1)
    call = {"op": f"{name}.apply", "line": _applied_at(name, files), "argument": None}
    inputs = _forward_inputs(log, name)
    if found.re.pattern == _COUNT:
        expected, got = int(found.group(2)), int(found.group(3))
        each = f" ({', '.join(inputs)})" if inputs else ""
        fix = (f"`{name}.backward` must return {expected} gradient{'s' * (expected != 1)}, one per input of forward"
               f"{each}, in order, None for an input that needs none; it returned {got}")
        return BackwardFailure("function_grads", None, fix, call=call, message=message)
    index, shape, wanted = int(found.group(2)), found.group(3), found.group(4)
    call["argument"] = argument = inputs[index] if index < len(inputs) else f"input {index}"
    fix = (f"`{name}.backward`'s gradient for `{argument}` (input {index}) has shape [{shape}]; it must have the "
           f"shape of `{argument}`, [{wanted}] (sum over the broadcast dimensions)")
    return BackwardFailure("function_grads", argument, fix, call=call, message=message)


def _applied_at(name: str, files: list[str]) -> str | None:
    """The first line of the user's files that calls `NAME.apply(`."""
    needle = rf"\b{re.escape(name)}\.apply\("  # (re caches the compiled pattern)
    for path in dict.fromkeys(files):
        for number, text in enumerate(linecache.getlines(path), 1):
            if re.search(needle, text):
                return f"{path}:{number}"
    return None


def _forward_inputs(log: FailureLog, name: str) -> list[str]:
    """The names of forward's inputs (after ctx) of the Function class `name`, found in the failing graph."""
    nodes = graph_nodes(log.failed_in.roots) if log.failed_in is not None else []
    cls = next((c for n in nodes if (c := getattr(n, "_forward_cls", None)) is not None and c.__name__ == name), None)
    try:
        return list(inspect.signature(cls.forward).parameters)[1:] if cls is not None else []
    except (TypeError, ValueError):
        return []
