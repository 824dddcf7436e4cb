"""The gradients behind the report, and torch's own answer when the trace cannot see part of the computation.

`explain` asks `torch.autograd.grad` for the parameters' gradients (`.grad` is left alone, the graph kept). A
reentrant `torch.utils.checkpoint` runs its forward with grad off and refuses autograd.grad; there the report
comes from a plain `loss.backward()` with every `.grad` put back, run with the trace recording the checkpoint's
recomputation (trace.replaying), which shows how each parameter inside gets its gradient.

One case stays blind to both the trace and autograd.grad: a custom autograd.Function that uses a parameter it
was not given. The forward ran with grad off, so the graph has no edge to that parameter; in a plain
`loss.backward()` the Function's backward builds one and accumulates into `.grad` itself. autograd.grad then
says None where training gets a gradient. So when the trace saw such a use, the truth is checked: a plain
`loss.backward()` runs with every `.grad` the trace can reach saved and put back. A parameter on which the two
disagree is reported "untraced".
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress

import torch

from gradflow.errors import GradflowError, UntracedError, text_of
from gradflow.tracer.failures import freed_elsewhere
from gradflow.tracer.source_lines import raised_by_gradflow, user_failure
from gradflow.values.jsonable import dense

BACKWARD_HINT = ("the backward pass through your model failed (a hook that raises, a tensor changed in place "
                 "after it was saved...); fix it there, rerun with --debug for the full traceback")


@dataclass
class Gradients:
    grads: list  # per tensor: what the report shows (torch.autograd.grad's, or the plain backward's)
    plain: list | None = None  # per tensor: a plain loss.backward()'s .grad, when it was checked
    checked: bool = False  # a plain backward could run (no post-accumulate-grad hook would fire)


class _Refused(Exception):
    """autograd.grad cannot run through a reentrant checkpoint in the way."""


def hidden_serials(trace, serials: set[int]) -> set[int]:
    """The parameters used inside a custom Function that was not given them (only a custom Function's forward
    makes such a use: none without one, and no walk of the uses)."""
    if not trace.state.functions:
        return set()
    return {u.serial for u in trace.state.uses if u.hidden and u.serial in serials}


def gradients(trace, loss, tensors: list, hidden: set[int], retain_graph: bool) -> Gradients:
    """Each tensor's gradient; with hidden uses, also what a plain backward gives (see the module's doc)."""
    flags = [t.requires_grad for t in tensors]  # (asked once)
    wanted = list(compress(tensors, flags))
    if not loss.requires_grad or not wanted:
        return Gradients([None] * len(tensors))
    if trace.regions.checkpoint_ops:  # reentrant checkpoints: a plain backward, recording their recomputation
        leaves = grad_leaves(trace, tensors)
        if not _would_hook(leaves):
            with trace.replaying():
                plain = plain_grads(loss, leaves, tensors, retain_graph)
            if plain is not None:
                return Gradients(plain, plain, checked=True)
    leaves = grad_leaves(trace, tensors) if hidden else _retaining(trace)  # autograd.grad fills retain_grad()'s
    may_refuse = "CheckpointFunction" in trace.state.functions  # and free part of the graph before it does
    try:
        with _grads_put_back(leaves), trace.listening():  # a reentrant backward accumulates into .grad
            grads = _grad(loss, flags, wanted, retain_graph or bool(hidden) or may_refuse, trace.failures)
    except _Refused:  # (its checkpointed code may use no parameter at all: then `leaves` is still empty)
        with trace.listening():
            plain = plain_grads(loss, leaves or grad_leaves(trace, tensors), tensors, retain_graph)
        if plain is None:
            raise GradflowError("untraceable", "torch.autograd.grad cannot run through the reentrant checkpoint "
                                "in this model, and a plain backward would run a post-accumulate-grad hook",
                                hint="use torch.utils.checkpoint(..., use_reentrant=False)") from None
        return Gradients(plain, plain, checked=True)
    if not hidden:
        return Gradients(grads)
    plain = plain_grads(loss, leaves, tensors, retain_graph)  # the hooks do not listen: the flows stay autograd.grad's
    return Gradients(grads, plain, checked=plain is not None)


def _grad(loss, flags: list[bool], wanted: list, retain_graph: bool, failures=None) -> list:
    """torch.autograd.grad of the `wanted` tensors, in the order of `flags` (each tensor's requires_grad before the
    backward: None for those that did not), sparse ones made dense. A graph freed by a backward() of the user's
    that started elsewhere (`failures`, the trace's failure log, says so) is their code's failure, not a loss
    already backwarded."""
    try:
        grads = torch.autograd.grad(loss, wanted, allow_unused=True, retain_graph=retain_graph)
    except Exception as err:
        if isinstance(err, RuntimeError) and "second time" in text_of(err) and \
                not freed_elsewhere(failures, loss, err):
            raise GradflowError("graph_freed", "the loss's graph was already used by a backward pass",
                                hint="explain before calling loss.backward(), or backward(retain_graph=True)") from None
        if isinstance(err, RuntimeError) and "incompatible with .grad()" in text_of(err):
            raise _Refused() from None
        if raised_by_gradflow(err):
            raise
        raise user_failure("backward", err, hint=BACKWARD_HINT) from err  # a hook, a tensor changed in place, ...
    given = iter(grads)
    each = grads if len(wanted) == len(flags) else [next(given) if f else None for f in flags]
    return [dense(g) for g in each]


def grad_leaves(trace, tensors: list) -> list:
    """Every live tensor whose .grad a backward may write: the parameters, and what the trace saw."""
    found = {id(t): t for t in [*tensors, *trace.seen()] if isinstance(t, torch.Tensor)
             and ((t.is_leaf and t.requires_grad) or t.retains_grad)}
    return list(found.values())


def _retaining(trace) -> list:
    """The tensors the trace saw that retain their .grad (t.retain_grad()): torch.autograd.grad writes it."""
    return [t for t in trace.seen() if t.retains_grad]  # (retains_grad is False on a leaf)


@contextmanager
def _grads_put_back(leaves: list):
    """Save the tensors' .grad and set them to None; put the saved ones back on exit."""
    saved = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    try:
        yield
    finally:
        for t, g in zip(leaves, saved):
            t.grad = g


def _backward(loss, retain_graph: bool, seed):
    """loss.backward(seed), straight into autograd's engine where torch has it: torch.autograd.backward is a
    function torch runs with the trace's mode switched off, and the engine must run the checkpoints'
    recomputation with it on (trace.replaying)."""
    seed = torch.ones_like(loss) if seed is None else seed
    try:
        from torch.autograd.graph import _engine_run_backward
    except ImportError:  # another torch: the recomputation goes unseen, its parameters stay "untraced"
        torch.autograd.backward(loss, seed, retain_graph=retain_graph)
        return
    _engine_run_backward((loss,), (seed,), retain_graph, False, (), allow_unreachable=True, accumulate_grad=True)


def _would_hook(leaves: list) -> bool:
    """A plain backward would run a post-accumulate-grad hook (an optimizer step in backward, say)."""
    return any(getattr(t, "_post_accumulate_grad_hooks", None) for t in leaves)


def plain_grads(loss, leaves: list, tensors: list, retain_graph: bool, seed=None) -> list | None:
    """The .grad a plain loss.backward() (seeded with `seed`, ones if None) leaves on each tensor, every .grad of
    `leaves` (grad_leaves) put back as it was; None when that cannot be done harmlessly (a post-accumulate-grad
    hook, an optimizer step in backward, would run)."""
    if _would_hook(leaves):
        return None
    with _grads_put_back(leaves):
        try:
            _backward(loss, retain_graph, seed)
        except Exception as err:
            if raised_by_gradflow(err):
                raise
            raise user_failure("backward", err, hint=BACKWARD_HINT) from err
        return [dense(t.grad) if t.requires_grad else None for t in tensors]


def settle(trace, got: Gradients, i: int, t, hidden: set[int], serial: int | None) -> tuple[object, str | None]:
    """(the gradient to report, why the parameter is untraced or None). Untraced: used where the trace cannot
    see, and torch's plain backward disagrees with autograd.grad, refused it, or could not be asked. `serial`:
    the trace's for t (trace.known(t))."""
    if serial not in hidden or not t.requires_grad:
        return got.grads[i], None
    if got.plain is None:
        disagree = got.grads[i] is None
    else:  # when autograd.grad refused, its answer is unknown: the plain backward's is the report's
        disagree = got.plain is got.grads or (got.grads[i] is None) != (got.plain[i] is None)
    if not disagree:
        return got.grads[i], None
    grad = got.grads[i] if got.plain is None else got.plain[i]
    use = next(u for u in trace.state.uses if u.serial == serial and u.hidden)
    rec = trace.ops[use.op]
    at = f" at {rec.line}" if rec.line else ""
    where = (f"computed inside a reentrant checkpoint (use_reentrant=True){at}, which gradflow cannot trace yet"
             if rec.inside == "CheckpointFunction" else
             f"used inside the autograd.Function {rec.inside}{at} without being one of its inputs, so gradflow "
             "cannot see how its gradient flows")
    if not got.checked:
        return grad, f"{where}; gradflow could not check what a plain loss.backward() gives it (a " \
                     "post-accumulate-grad hook would run)"
    return grad, f"{where}; a plain loss.backward() gives it {'a' if grad is not None else 'no'} gradient"


def untraced_error(params: list) -> UntracedError:
    """The report's error when some parameters are untraced (exit 4: the rest of the report stands)."""
    untraced = [p for p in params if p.status == "untraced"]
    names = [p.name for p in untraced]
    reasons = " ".join(p.reason or "" for p in untraced)
    hint = "pass use_reentrant=False to torch.utils.checkpoint, which gradflow can trace" \
        if "reentrant checkpoint" in reasons else "pass the tensors your autograd.Function uses as its inputs" \
        if "autograd.Function" in reasons else "compute the whole loss inside FUNCTION (or the trace), in one thread"
    return UntracedError("untraced", f"{len(names)} parameter{'s' * (len(names) != 1)} could not be traced: "
                         f"{', '.join(names[:3])}{f' (+{len(names) - 3} more)' if len(names) > 3 else ''}; "
                         "their gradient is torch's, but gradflow cannot say how it flows (see the reasons)",
                         hint=hint)
