"""Why backward failed, in the user's words: the failure classes gradflow explains, from a FailureLog and torch's
own error (tracer/failure_log.py records; this module reads the record once torch has raised; `explain_errors`,
tracer/explain_errors.py, attaches it to torch's error as `err.gradflow`, a BackwardFailure). Kinds:
- inplace_saved: a tensor saved for backward was written in place afterwards (torch: "modified by an inplace
  operation"): the op that saved it, the lines that wrote it (through a view too), the fix;
- graph_freed: backward through a graph an earlier backward() freed (torch: "backward through the graph a second
  time"): that earlier backward's line, the tensor that carries the freed part, the fix for that shape;
- leaf_inplace: an in-place op on a leaf that requires grad, or a view of one;
- nonleaf_grad: `.grad` read on a tensor that is not a leaf (torch only warns and gives None): the op that made
  it, and the leaf to read instead. Given as a warning (GradflowWarning), or attached to the error it led to;
- checkpoint_no_grad: a reentrant checkpoint none of whose inputs required grad (backward then finds nothing that
  requires grad): the checkpointing call and the fix by name;
- no_derivative, function_grads: an op without a derivative for an argument, a custom Function's backward that
  returns the wrong gradients (tracer/failure_calls.py).
`explained()` gives the commands' error the same explanation (`gradflow script`, `gradflow inspect`).
"""
from __future__ import annotations

import ast
import math
import re
from types import TracebackType

import torch

from gradflow.errors import GradflowError, NoGradientError, UserCodeError, text_of
from gradflow.tracer.failure_calls import WORDS as CALL_WORDS
from gradflow.tracer.failure_calls import call_on, function_grads, no_derivative
from gradflow.tracer.failure_log import BackwardSeen, FailureLog, NonLeafGrad, OpSeen, Write, seen, warn_at
from gradflow.tracer.failure_words import (
    BackwardFailure,
    fix_for_write,
    named_at,
    parameter_name,
    recurrent_name,
    tensor_names,
)
from gradflow.tracer.source_lines import short_path, their_code, user_frames
from gradflow.tracer.teardown import graph_nodes as reachable

# torch's words (re caches the compiled pattern)
_VERSION = (r"modified by an inplace operation: \[\S+ \[([\d, ]*)\]\](?:, which is output \d+ of "
            r"(\w+),)? is at version (\d+); expected version (\d+) instead")
_SECOND_TIME = "backward through the graph a second time"
_NO_GRAD = "does not require grad and does not have a grad_fn"
_LEAF = "leaf Variable that requires grad is being used in an in-place operation"
_EXPLAINED = (_VERSION, _SECOND_TIME, _NO_GRAD, _LEAF, *CALL_WORDS)
_NOT_SAVING = {"add", "sub", "__add__", "__sub__", "__radd__", "__rsub__", "__iadd__", "neg", "sum", "mean",
               "view", "reshape", "clone", "__getitem__", "expand", "t", "transpose", "permute", "contiguous",
               "detach", "to", "float", "double", "flatten", "squeeze", "unsqueeze", "cat", "stack", "zeros_like"}


class GradflowWarning(UserWarning):
    """gradflow's explanation of something torch only warns about (a `.grad` read that gives None)."""


# ---- class 1: a saved tensor written in place ---------------------------------------------------------------
def _inplace_saved(log: FailureLog, message: str, tb: TracebackType | None) -> BackwardFailure | None:
    m = re.search(_VERSION, message)
    if m is None:
        return None
    shape = tuple(int(d) for d in m.group(1).split(",") if d.strip())
    now, expected = int(m.group(3)), int(m.group(4))
    storage = _written_storage(log, shape, expected, now)
    if storage is None:
        return None
    writes = [w for w in log.writes if w.tensor.storage == storage and expected < w.tensor.version <= now]
    saver = _saver(log, storage, expected, shape, writes[0].index)
    name = named_at(writes[0].line) or parameter_name(_user_frames(tb), storage) or \
        (named_at(saver.line, assigned=True) if saver is not None else None)
    return BackwardFailure("inplace_saved", name, fix_for_write(writes[0], name), modified_at=_lines(writes),
                           saved_by=None if saver is None else {"op": saver.name, "line": saver.line},
                           message=message)


def _lines(writes: list[Write]) -> list[str]:
    return list(dict.fromkeys(w.line for w in writes if w.line))


def _written_storage(log: FailureLog, shape: tuple, expected: int, now: int) -> int | None:
    """The storage whose writes took it from version `expected` to `now`, preferring one an op saw at `expected`
    with the tensor's shape (the saved tensor itself, or the base of the view that was written)."""
    found = [w.tensor.storage for w in reversed(log.writes) if w.tensor.version == expected + 1]
    for same in (lambda s: s.shape == shape, lambda s: math.prod(s.shape) == math.prod(shape)):
        for storage in found:
            if any(s.storage == storage and s.version == expected and same(s)
                   for op in log.ops for s in (*op.ins, *op.outs)):
                return storage
    return found[0] if found else None


def _saver(log: FailureLog, storage: int, version: int, shape: tuple, before: int) -> OpSeen | None:
    """The last op before the first write that had the tensor (at the version torch expected) as an input or
    result and saves its tensors for backward. Its shape may differ from the saved one: an op may save a view
    (linear saves its weight transposed), so a tensor with as many elements counts when none has the shape."""
    candidates = [op for op in reversed(log.ops) if op.index < before and op.name not in _NOT_SAVING]
    for same in (lambda s: s.shape == shape, lambda s: math.prod(s.shape) == math.prod(shape)):
        for op in candidates:
            if any(s.storage == storage and s.version == version and same(s) for s in (*op.ins, *op.outs)):
                return op
    return None


# ---- class 2: a graph an earlier backward freed --------------------------------------------------------------
def graph_nodes(roots: list) -> dict:
    """Every autograd node reachable from these (AccumulateGrad, a leaf's, is shared by every graph: left out)."""
    return {id(n): n for n in reachable(roots) if type(n).__name__ != "AccumulateGrad"}


def _graph_freed(log: FailureLog, message: str, tb: TracebackType | None) -> BackwardFailure | None:
    if _SECOND_TIME not in message or log.failed_in is None:
        return None
    failing = graph_nodes(log.failed_in.roots)
    for earlier in reversed(log.backwards):
        freed = graph_nodes(earlier.roots).keys() & failing.keys()
        if earlier.roots and freed:
            name, old = _carrier(tb, failing, freed)
            if name is None:  # no frame of the user's names it any more (inspect: their function returned)
                name, old = recurrent_name([op.line for op in log.ops if op.index > earlier.index]), False
            stepped = any(w.optimizer and earlier.index < w.index < log.failed_in.index for w in log.writes)
            return BackwardFailure("graph_freed", name, _fix_freed(name, old, stepped, earlier.line),
                                   freed_by=earlier.line, freed_call=earlier.number, message=message)
    return None


def _carrier(tb: TracebackType | None, failing: dict, freed) -> tuple[str | None, bool]:
    """The named tensor that brings the freed graph into this one: one whose own node was freed (old: True), else
    the newer one nearest to the freed part (a recurrent state computed from last iteration's)."""
    named = [(n, t) for n, t in tensor_names(_user_frames(tb)) if t.grad_fn is not None and id(t.grad_fn) in failing]
    old = [n for n, t in named if id(t.grad_fn) in freed]
    if old:
        return old[0], True
    best = min(named, key=lambda nt: _distance(nt[1].grad_fn, freed), default=None)
    return (best[0] if best else None), False


def _distance(node, targets) -> int:
    level, depth = [node], 0
    seen_ids: set[int] = set()
    while level and depth < 10_000:
        if any(id(n) in targets for n in level):
            return depth
        seen_ids.update(map(id, level))
        level = [n for x in level for n, _ in x.next_functions if n is not None and id(n) not in seen_ids]
        depth += 1
    return 1 << 30


def _fix_freed(name: str | None, old: bool, stepped: bool, line: str | None) -> str:
    t = name or "the tensor"
    if name is None:
        return (f"detach what carries the graph of the backward() at {line} into this one (`h = h.detach()` between "
                "iterations), or call backward() once on the sum of the losses")
    if not old:
        return (f"detach between iterations: `{t} = {t}.detach()` before it is used again, so each backward() "
                "covers one iteration (truncated backpropagation through time)")
    if stepped:
        return (f"use `{t}.detach()` in the loss of the backward() at {line}, so that backward (and the "
                f"optimizer step after it) does not go through what made `{t}`")
    return (f"add the losses and call backward() once, `(loss_a + loss_b).backward()`; or pass retain_graph=True "
            f"to the backward() at {line} if you need the gradients in between")


# ---- class 6: a reentrant checkpoint autograd did not record ----------------------------------------------------
def _checkpoint(log: FailureLog, message: str) -> BackwardFailure | None:
    if _NO_GRAD not in message or not log.checkpoints:
        return None
    dead = log.checkpoints[-1]
    call = {"op": "torch.utils.checkpoint(use_reentrant=True)", "line": dead.line, "library_line": dead.library_line}
    return BackwardFailure("checkpoint_no_grad", None, dead.fix(_first_input(dead.line)), call=call, message=message)


def _first_input(line: str | None) -> str | None:
    """The first tensor given to the checkpoint call on the user's line, as written (`h` in `checkpoint(block, h)`),
    when it is a name (or an attribute, an item) the fix can call requires_grad_() on."""
    call = call_on(line, lambda name: "checkpoint" in name)
    if call is None or len(call.args) < 2 or not isinstance(call.args[1], (ast.Name, ast.Attribute, ast.Subscript)):
        return None
    return ast.unparse(call.args[1])


# ---- classes 3 and 5 ---------------------------------------------------------------------------------------------
def _leaf_inplace(log: FailureLog, message: str) -> BackwardFailure | None:
    w = log.leaf_write
    if _LEAF not in message or w is None:
        return None
    name = named_at(w.line)
    view = "a view of" in message
    t = name or "the tensor"
    fix = (f"initialising it? write under `with torch.no_grad():`. Part of the computation? write into a copy: "
           f"`{t} = {t}.clone()` first" + (" (the view shares the leaf's memory)" if view else ""))
    return BackwardFailure("leaf_inplace", name, fix, modified_at=[w.line] if w.line else [], message=message)


def nonleaf_grad(log: FailureLog, read: NonLeafGrad, tb: TracebackType | None = None) -> BackwardFailure:
    t = read.tensor
    made = next((op for op in reversed(log.ops) if any(s.storage == seen(t).storage and s.shape == tuple(t.shape)
                                                       for s in op.outs)), None)
    name = named_at(read.line, grad=True)
    leaf = _hidden_leaf(t)
    if leaf is not None:
        fix = (f"`{name or 'it'}` is a copy made by {made.name if made else 'an op'} of the leaf that requires grad"
               f"; read the leaf's .grad: keep the leaf in a variable, or make it on the right dtype/device with "
               f"requires_grad=True there (`torch.randn(..., dtype=..., requires_grad=True)`)")
    else:
        fix = f"call `{name or 'it'}.retain_grad()` before backward(), or read .grad of the leaf it was made from"
    return BackwardFailure("nonleaf_grad", name, fix, modified_at=[],
                           made_by=None if made is None else {"op": made.name, "line": made.line})


def warn_nonleaf_reads(log: FailureLog) -> None:
    """Each `.grad` read on a non-leaf that gave None, as a warning at the user's line that read it (where torch's
    own warning points too): nothing failed there, so the text is the finding and its fix, not "why backward
    failed"."""
    for read in log.nonleaf_grads:
        failure = nonleaf_grad(log, read)
        text = "\n".join([failure.what, *failure.details()])
        path, _, number = (read.line or "").rpartition(":")
        known = bool(path) and number.isdigit()
        warn_at(GradflowWarning(text), GradflowWarning, path if known else None, int(number) if known else 0,
                stacklevel=3)


def _hidden_leaf(t: torch.Tensor):
    """The leaf behind a copy (`.to()`, `.double()`, `.cuda()` after requires_grad=True), if that is all it is."""
    node = t.grad_fn
    if node is None or type(node).__name__ not in ("ToCopyBackward0", "CloneBackward0"):
        return None
    parents = [n for n, _ in node.next_functions if n is not None]
    return parents[0].variable if len(parents) == 1 and hasattr(parents[0], "variable") else None


# ---- the entry points --------------------------------------------------------------------------------------------
def _user_frames(tb: TracebackType | None) -> list:
    frames = []
    while tb is not None:
        if their_code(tb.tb_frame.f_code.co_filename):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _user_files(log: FailureLog, tb: TracebackType | None) -> list[str]:
    """The user's files: those their latest recorded ops ran in, then those of their frames in the traceback,
    innermost first."""
    ran = [op.line.rpartition(":")[0] for op in reversed(log.ops) if op.line]
    return ran + [short_path(f.f_code.co_filename) for f in reversed(_user_frames(tb))]


def explains(err: BaseException) -> bool:
    """Whether torch's error is one gradflow may explain, by its words alone (before any record is read)."""
    message = text_of(err)
    if isinstance(err, RuntimeError):
        return any(re.search(words, message) for words in _EXPLAINED)
    return isinstance(err, (AttributeError, TypeError)) and "NoneType" in message  # a .grad read that gave None


def second_time(err: BaseException) -> bool:
    """torch's "backward through the graph a second time"."""
    return isinstance(err, RuntimeError) and _SECOND_TIME in text_of(err)


def explain_failure(log: FailureLog, err: BaseException) -> BackwardFailure | None:
    """The explanation of torch's error `err`, if it is one of the classes gradflow explains."""
    message = text_of(err)
    if isinstance(err, RuntimeError):
        return (_inplace_saved(log, message, err.__traceback__) or _graph_freed(log, message, err.__traceback__)
                or _leaf_inplace(log, message) or _checkpoint(log, message) or no_derivative(log, message)
                or function_grads(log, message, _user_files(log, err.__traceback__)))
    if isinstance(err, (AttributeError, TypeError)) and "NoneType" in message and log.nonleaf_grads:
        return nonleaf_grad(log, log.nonleaf_grads[-1], err.__traceback__)
    return None


def attach(err: BaseException, failure: BackwardFailure | None, note: str = "") -> None:
    """Add the explanation to torch's error, in place: the same exception, its message then the explanation.
    Without one, the `note` (and `err.gradflow` None: tried, so an outer function form does not try again)."""
    if failure is not None:
        failure.message = failure.message or text_of(err)
        note = failure.describe()
    err.gradflow = failure  # type: ignore[attr-defined]
    if err.args and isinstance(err.args[0], str):
        err.args = (f"{err.args[0]}\n\n{note}", *err.args[1:])
    elif hasattr(err, "add_note"):
        err.add_note(note)


def _raised_at(err: BaseException) -> str | None:
    """The user's line the error came out of (the innermost frame of their code in its traceback)."""
    frames = user_frames(err.__traceback__)
    return f"{short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else None


def explained(error: GradflowError, log: FailureLog | None, err: BaseException | None) -> GradflowError:
    """The commands' report of the user's failure `error` (torch's `err`): when gradflow explains it, the
    explanation first (what, the tensor, the lines, the fix), then torch's own message; the same as fields in
    `error.backward_failure` (its JSON)."""
    if log is None or err is None or not isinstance(error, (UserCodeError, NoGradientError)):
        return error
    failure = explain_failure(log, err)
    if failure is None:
        return error
    where = error.message.rpartition(" (at ")[2].rstrip(")") if " (at " in error.message else _raised_at(err)
    error.message = f"backward failed: {failure.what}" + (f" (at {where})" if where else "")
    said = f"{type(err).__name__}: {text_of(err)}"
    error.detail = "\n".join([*failure.details(), f"torch says: {said}"])
    error.hint = "rerun with --debug for the full traceback"
    error.backward_failure = {**failure.to_dict(), "torch_message": said}
    return error


def freed_elsewhere(log: FailureLog | None, loss: torch.Tensor, err: BaseException) -> bool:
    """gradflow's own backward from `loss` (inspect's) met a graph that an earlier backward() of the user's freed,
    and that backward did not start at the loss (truncated backpropagation through time: the loss itself was
    never backwarded; a state carried from the last chunk brings the freed part in)."""
    if log is None or loss.grad_fn is None:
        return False
    log.failed_in = BackwardSeen(next(log._count), 0, None, True, [loss.grad_fn])
    failure = _graph_freed(log, text_of(err), err.__traceback__)
    freeing = next((b for b in reversed(log.backwards) if b.line == failure.freed_by), None) if failure else None
    return freeing is not None and not any(r is loss.grad_fn for r in freeing.roots)
