"""`gradflow.watch(model)`: which parameters get gradient at each step of a real training loop.

    w = gradflow.watch(model)                 # or watch(model, optimizer=opt): its step() closes each step
    for x, y in batches:
        loss_fn(model(x), y).backward()
        w.step()                              # after backward, before zero_grad
        opt.step(); opt.zero_grad()
    print(w.summary()); w.to_dict()

A post-accumulate-grad hook on each parameter notes that a gradient arrived (nothing else runs in backward);
`step()` reads those gradients' norms in one batched call. A parameter that is frozen when watching starts
gets its hook when it starts to require grad (checked before each forward of the model, and at each step).
Per parameter, the statuses are kept as runs of steps, so a long loop costs little memory. Statuses:
live, zero (exactly zero), nonfinite (nan or inf), none (requires grad, got nothing), frozen (requires_grad
False), and with an optimizer, untrained (got gradient, but is in no param group at that step).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gradflow.display import Shown
from gradflow.report.naming import name_modules
from gradflow.report.optimizer_coverage import group_of
from gradflow.values.jsonable import dense, dumps

STATUSES = ("live", "zero", "nonfinite", "none", "frozen", "untrained")
_SHOWN_RANGES = 6  # step ranges written out per status in the summary; the rest are counted


@dataclass
class Watched:
    """One parameter's history: runs of (status, first step, last step)."""

    name: str
    tensor: torch.Tensor
    aliases: list[str] = field(default_factory=list)
    runs: list[list] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # step -> why it got nothing (w.explain, on demand)

    def add(self, status: str, step: int) -> None:
        if self.runs and self.runs[-1][0] == status and self.runs[-1][2] == step - 1:
            self.runs[-1][2] = step
        else:
            self.runs.append([status, step, step])

    @property
    def changed(self) -> bool:
        return len({r[0] for r in self.runs}) > 1

    def status_at(self, step: int) -> str | None:
        return next((s for s, a, b in self.runs if a <= step <= b), None)

    def steps_by_status(self) -> dict[str, list[tuple[int, int]]]:
        out: dict[str, list[tuple[int, int]]] = {}
        for s, a, b in self.runs:
            out.setdefault(s, []).append((a, b))
        return out

    def to_dict(self) -> dict:
        return {"name": self.name, "aliases": self.aliases, "changed": self.changed,
                "runs": [{"status": s, "first": a, "last": b} for s, a, b in self.runs],
                "reasons": {str(k): v for k, v in self.reasons.items()}}


class Watch(Shown):
    """Records, per step, which parameters got gradient. `step()` closes a step; `close()` removes the hooks."""

    def __init__(self, model, optimizer=None):
        self.model = model
        self.params = _named(model)
        self._trace = None
        self.optimizer = optimizer
        self.steps = 0
        self._got: dict[int, torch.Tensor] = {}  # index -> the gradient seen by the hook during this step
        self._hooked: set[int] = set()
        self._handles: list = []
        if isinstance(model, torch.nn.Module):
            self._handles.append(model.register_forward_pre_hook(lambda m, a: self._hook_new()))
        if optimizer is not None:
            group_of(optimizer)  # checks it is an optimizer
            self._handles.append(optimizer.register_step_pre_hook(lambda opt, a, kw: self.step() and None))
        self._hook_new()

    # ---- recording ------------------------------------------------------------------
    def _hook_new(self) -> None:
        for i, w in enumerate(self.params):
            if i not in self._hooked and w.tensor.requires_grad:
                self._hooked.add(i)
                self._handles.append(w.tensor.register_post_accumulate_grad_hook(
                    lambda t, i=i: self._got.__setitem__(i, t.grad)))

    def step(self) -> dict[str, str]:
        """Close this step: {name: status} for it (and start the next one)."""
        self._hook_new()
        got, self._got = self._got, {}
        norms = _norms([got[i] for i in sorted(got)])
        norm_of = dict(zip(sorted(got), norms))
        groups = group_of(self.optimizer) if self.optimizer is not None else None
        out = {}
        for i, w in enumerate(self.params):
            status = _status(w.tensor, norm_of.get(i), groups)
            w.add(status, self.steps)
            out[w.name] = status
        self.steps += 1
        return out

    def trace(self):
        """`with w.trace(): loss = ...` records this step's forward, for `w.explain(loss)` (costs a traced step)."""
        from gradflow.report.build import trace

        self._trace = trace()
        return self._trace

    def explain(self, loss):
        """Why each parameter gets nothing at this step, from the forward `w.trace()` recorded: the reasons are
        kept with the step (summary, to_dict). The graph is kept, so `loss.backward()` still runs; returns the
        InspectReport."""
        from gradflow.errors import GradflowError

        if self._trace is None:
            raise GradflowError("no_trace", "w.explain(loss) needs the forward recorded by w.trace()",
                                hint="with w.trace(): loss = loss_fn(model(x), y)")
        report = self._trace.explain(loss, params=self.model, retain_graph=True)
        self._trace = None
        for w in self.params:
            p = report.param(w.name)
            if p.why and p.status != "live":
                w.reasons[self.steps] = p.why
        return report

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- results --------------------------------------------------------------------
    @property
    def changed(self) -> list[Watched]:
        """Parameters whose status was not the same at every step."""
        return [w for w in self.params if w.changed]

    def param(self, name: str) -> Watched:
        for w in self.params:
            if w.name == name or name in w.aliases:
                return w
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {"steps": self.steps, "changed": [w.name for w in self.changed],
                "params": [w.to_dict() for w in self.params]}

    def to_json(self, **kw) -> str:
        return dumps(self.to_dict(), **kw)

    def summary(self) -> str:
        """A readable account: the parameters whose status changed, then the steady ones by status."""
        n = len(self.params)
        lines = [f"{self.steps} step{'s' * (self.steps != 1)}, {n} parameter tensor{'s' * (n != 1)}"]
        groups: dict[tuple, list[str]] = {}
        for w in self.changed:
            groups.setdefault((_history(w.steps_by_status()), tuple(sorted(w.reasons.items()))), []).append(w.name)
        if groups:
            lines.append(f"changed status between steps ({len(self.changed)}):")
            for (history, reasons), names in groups.items():
                lines.append(f"  {_names(names)}: {history}")
                lines += [f"    why at step {k}: {v}" for k, v in reasons]
        steady: dict[str, list[str]] = {}
        for w in self.params:
            if not w.changed and w.runs:
                steady.setdefault(w.runs[0][0], []).append(w.name)
        for status in STATUSES:
            if status in steady:
                names = steady[status]
                shown = "" if status == "live" else f": {_names(names)}"
                lines.append(f"{status} at every step ({len(names)}){shown}")
        return "\n".join(lines)


def watch(model, optimizer=None) -> Watch:
    """Watch `model` (a Module, or a dict of name -> tensor) across training steps; see `Watch`."""
    return Watch(model, optimizer)


def _named(model) -> list[Watched]:
    if isinstance(model, torch.nn.Module):  # a tied weight once, with its other names
        return [Watched(name, p, aliases) for name, (p, *aliases) in name_modules([model], [""])[0].items()]
    if isinstance(model, dict) and all(isinstance(v, torch.Tensor) for v in model.values()):
        return [Watched(str(k), v) for k, v in model.items()]
    from gradflow.errors import GradflowError

    raise GradflowError("bad_params", f"watch() takes a Module or a dict of name -> tensor, not "
                        f"{type(model).__name__}", hint="gradflow.watch(model)")


def _norms(grads: list) -> list[float]:
    if not grads:
        return []
    norms = torch._foreach_norm([dense(g) for g in grads])
    try:
        return torch.stack([x.float() for x in norms]).tolist()
    except RuntimeError:  # on several devices
        return [float(x) for x in norms]


def _status(t: torch.Tensor, norm: float | None, groups: dict[int, int] | None) -> str:
    if norm is None:
        return "none" if t.requires_grad else "frozen"
    if groups is not None and id(t) not in groups:
        return "untrained"
    if norm != norm or norm in (float("inf"), float("-inf")):
        return "nonfinite"
    return "zero" if norm == 0 else "live"


def _ranges(spans: list[tuple[int, int]]) -> str:
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:_SHOWN_RANGES]]
    more = f" (+{len(spans) - _SHOWN_RANGES} more)" if len(spans) > _SHOWN_RANGES else ""
    word = "step" if len(spans) == 1 and spans[0][0] == spans[0][1] else "steps"
    return f"{word} {', '.join(text)}{more}"


def _history(by_status: dict[str, list[tuple[int, int]]]) -> str:
    return "; ".join(f"{s} at {_ranges(spans)}" for s, spans in by_status.items())


def _names(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" (+{len(names) - shown} more)" if len(names) > shown else "")
