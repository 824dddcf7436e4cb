"""The optimizers a script creates, seen as it creates and steps them, and what they do to its parameters.

`OptimizerWatch` is a context manager around the run: `torch.optim.Optimizer.__init__` is wrapped while it is on
(to learn each optimizer's line in the user's code; torch has no creation hook), and torch's global step
pre/post hooks (`register_optimizer_step_pre_hook`/`post_hook`) see every step(). Four findings, each once per
parameter:
- `moved`: a parameter that got no gradient (requires_grad=False, or no backward() since the last step() gave it
  one: its .grad, zeros included, is left over) and still changed in step(): momentum, Adam's moments or weight
  decay moved it, or the left-over .grad. Seen, not guessed: such a parameter is copied before step() and
  compared after (only those, so the cost stays small);
- `unheld_accumulates`: a parameter in no optimizer whose .grad keeps growing: zero_grad() never clears it;
- `never_zeroed`: a step() whose parameter's .grad still holds the gradient an earlier step() already used, a
  backward() having added to it since: zero_grad() is not called between steps. Accumulating over several
  backward() calls before one step is not flagged, nor a GAN's generator step adding to the discriminator's
  used .grad when zero_grad() clears it before the discriminator's next step;
- `unheld`: a parameter that gets gradient but is in no optimizer, while the script has one.
The backward() side (`at_backward`) reads the recorder's `Named` tensors; nothing is kept per step.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from gradflow.script.recorder import BackwardCall
from gradflow.tracer.source_lines import user_line

_SHOWN_OPTIONS = ("momentum", "weight_decay", "betas", "nesterov")


@dataclass
class Finding:
    kind: str  # moved | unheld_accumulates | never_zeroed | unheld
    name: str
    text: str
    call: int  # the backward() call at or after which it was seen

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "message": self.text, "call": self.call}


@dataclass
class Seen:
    """An optimizer the script created: how it is described, where it was made, how many steps it took."""

    ref: weakref.ref
    label: str
    line: str | None
    steps: int = 0


class OptimizerWatch:
    """Watches every optimizer the script creates; `findings` grows as they are found, `fresh()` hands out the
    new ones."""

    def __init__(self) -> None:
        self.seen: dict[int, Seen] = {}  # id(optimizer) -> what is known of it
        self.findings: list[Finding] = []
        self._told: set[tuple[str, str]] = set()
        self._new = 0  # findings already handed out by fresh()
        self.names: dict[int, str] = {}  # id(tensor) -> its name at the last backward()
        self.calls = 0
        self.steps = 0  # step() calls of all optimizers
        self._step_at: dict[str, int] = {}  # parameter name -> self.steps at its last backward()
        self._fed: set[int] = set()  # id(parameter) that a backward() since the last step() gave gradient
        self._used: set[int] = set()  # id(parameter) whose .grad a step() used and nothing has cleared since
        self._stale: set[int] = set()  # ... to which a backward() has added since: the next step() uses both
        self._before: dict[int, tuple[torch.Tensor, torch.Tensor, str]] = {}  # id -> (param, copy, why no grad)
        self._handles: list = []
        self._init: Any = None

    def __enter__(self) -> OptimizerWatch:
        plain = self._init = torch.optim.Optimizer.__init__
        watch = self

        def init(opt, *args, **kwargs):
            plain(opt, *args, **kwargs)
            watch.created(opt)

        torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign, assignment]
        self._handles = [register_optimizer_step_pre_hook(self._pre),
                         register_optimizer_step_post_hook(self._post)]
        return self

    def __exit__(self, *exc) -> None:
        torch.optim.Optimizer.__init__ = self._init  # type: ignore[method-assign]  # (as it was)
        for h in self._handles:
            h.remove()

    def created(self, opt) -> None:
        if id(opt) in self.seen and self.seen[id(opt)].ref() is opt:
            return
        self.seen[id(opt)] = Seen(weakref.ref(opt), describe(opt), user_line())

    def held(self) -> dict[int, Seen]:
        """id(parameter) -> the optimizer holding it, over every live optimizer the script made."""
        out: dict[int, Seen] = {}
        for s in self.seen.values():
            opt = s.ref()
            for group in getattr(opt, "param_groups", None) or []:
                for p in group["params"]:
                    out.setdefault(id(p), s)
        return out

    # ---- step() ------------------------------------------------------------------------------
    def _pre(self, opt, args, kwargs) -> None:
        if id(opt) not in self.seen or self.seen[id(opt)].ref() is not opt:
            self.created(opt)
        self._before = {}
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) in self._stale:
                    self._stale.discard(id(p))
                    name = self.names.get(id(p), f"a parameter of shape {tuple(p.shape)}")
                    self._find("never_zeroed", name, f"{name}.grad still held the gradient the last "
                               f"{type(opt).__name__}.step() used when a backward() added to it: call zero_grad() "
                               "after each step()")
                why = self._no_gradient(p)
                if why is not None and (id(p) not in self.names or ("moved", self.names[id(p)]) not in self._told):
                    self._before[id(p)] = (p, p.detach().clone(), why)

    def _no_gradient(self, p) -> str | None:
        """Why step() should leave `p` alone (it has no gradient to follow), or None when it has one. Read from
        what the backward() calls since the last step() gave it; a parameter they never named is looked at."""
        if p.grad is None:
            return None  # torch's optimizers skip it
        if not p.requires_grad:
            return "has requires_grad=False"
        if id(p) in self._fed:
            return None
        if id(p) in self.names or not (p.grad.is_sparse or bool(p.grad.any())):
            return "got no gradient from the backward() calls since the last step()"
        return None

    def _post(self, opt, args, kwargs) -> None:
        s = self.seen[id(opt)]
        s.steps += 1
        self.steps += 1
        self._used.update(id(p) for group in opt.param_groups for p in group["params"] if p.grad is not None)
        self._fed.clear()
        for p, copy, why in self._before.values():
            if not torch.equal(copy, p.detach()):
                name = self.names.get(id(p), f"a parameter of shape {tuple(p.shape)}")
                cause = _cause(opt, p)
                self._find("moved", name, f"{name} {why}, but it is still updated by {s.label}"
                           f"{' at ' + s.line if s.line else ''}, through {cause}: set its .grad = None or leave it "
                           "out of the optimizer")
        self._before = {}

    # ---- backward() --------------------------------------------------------------------------
    def at_backward(self, call: BackwardCall) -> None:
        """The accumulation and coverage findings, read from the tensors the backward() call named."""
        self.calls = call.index
        held = self.held() if self.seen else {}
        for n in call.named:
            t = n.tensor
            if not (t.is_leaf and t.requires_grad):
                continue
            self.names[id(t)] = n.name
            stepped = self.steps > self._step_at.get(n.name, self.steps)
            self._step_at[n.name] = self.steps
            if n.grad is None:
                continue
            self._fed.add(id(t))
            if not self.seen:
                continue
            if not n.accumulated:  # cleared (None or zeros) before this backward()
                self._used.discard(id(t))
                self._stale.discard(id(t))
            elif id(t) in self._used:
                self._stale.add(id(t))
            if id(t) not in held:
                self._find("unheld", n.name, f"{n.name} gets gradient but is in no optimizer: the optimizers the "
                           f"script made ({', '.join(s.label for s in self.seen.values())}) never update it")
                if n.accumulated and stepped:
                    self._find("unheld_accumulates", n.name, f"{n.name}.grad keeps growing: no optimizer holds it, "
                               "so zero_grad() never clears it (each backward() adds to it)")

    def _find(self, kind: str, name: str, text: str) -> None:
        if (kind, name) in self._told:
            return
        self._told.add((kind, name))
        self.findings.append(Finding(kind, name, text, self.calls))

    def fresh(self) -> list[Finding]:
        """The findings not handed out before."""
        out = self.findings[self._new:]
        self._new = len(self.findings)
        return out


def describe(opt) -> str:
    """`SGD(momentum=0.9)`: the optimizer's type and the options that move a parameter without a gradient."""
    d = getattr(opt, "defaults", {}) or {}
    shown = [f"{k}={d[k]}" for k in _SHOWN_OPTIONS if k in d and d[k] not in (0, 0.0, False, None)]
    return f"{type(opt).__name__}({', '.join(shown)})"


def _cause(opt, p) -> str:
    """What in the optimizer moves a parameter whose gradient is zero or stale."""
    group = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
    causes = []
    if p.grad is not None and bool(p.grad.ne(0).any()):
        causes.append("the .grad left from an earlier step")
    state = opt.state.get(p, {})
    if group.get("momentum") and "momentum_buffer" in state:
        causes.append("its momentum")
    if "exp_avg" in state:
        causes.append("its running averages of earlier gradients")
    if group.get("weight_decay"):
        causes.append("weight decay")
    return " and ".join(causes) or "its state from earlier steps"
