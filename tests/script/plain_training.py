"""The oracle for `gradflow script` on training loops: a script run by plain torch, with what happened at each
backward() and each optimizer step(), and the line that changed each parameter's requires_grad. It does not
import gradflow.

`watch_training(path, args)` runs the file as `python FILE.py ARGS` would (as `__main__`):
- torch.autograd.backward wrapped (Tensor.backward calls it): per call, its line, the loss, and for each named
  parameter (plain_grads.py's names: the calling frames' locals, then the script's globals) whether it requires
  grad and whether this call gave it a gradient (its .grad went from None to a tensor, or changed);
- the optimizers' global step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook / post_hook): a copy
  of every named parameter before step() and which of them step() changed (torch.equal), and which had a .grad;
- sys.settrace over the script's own frames: after each of its lines, every parameter of the modules its frames
  name whose requires_grad changed; the line that ran (the innermost line of the script's own code) is kept.
"""
from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .plain_grads import leaf, scopes


@dataclass
class Backward:
    line: int
    loss: float | None
    requires_grad: dict[str, bool]
    got: set[str]  # the names this call gave a gradient
    grads: dict[str, torch.Tensor]  # each .grad after the call


@dataclass
class Step:
    changed: set[str]  # the names whose value step() changed
    had_grad: set[str]  # the names with a .grad at step()


@dataclass
class Training:
    backwards: list[Backward] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    flags: dict[int, list[tuple[int, bool]]] = field(default_factory=dict)  # id(param) -> [(line, requires_grad)]
    ids: dict[str, int] = field(default_factory=dict)  # name -> id(param), as named at backward()
    error: BaseException | None = None

    def set_at(self, name: str, value: bool) -> int | None:
        """The line that last set this parameter's requires_grad, if the script did and set it to `value` (False:
        froze it, True: unfroze it)."""
        changes = self.flags.get(self.ids[name], [])
        return changes[-1][0] if changes and changes[-1][1] == value else None


def named_params(path: str, frame) -> dict[str, torch.Tensor]:
    """name -> leaf tensor (frozen ones too), named as gradflow names them: the first name found, innermost frame
    first; a module's parameters as `model.weight`."""
    found: dict[int, tuple[str, torch.Tensor]] = {}
    for scope in scopes(path, frame):
        for name, v in list(scope.items()):
            pairs = [(name, v)] if isinstance(v, torch.Tensor) else \
                list(v.named_parameters(prefix=name)) if isinstance(v, torch.nn.Module) else []
            for key, t in pairs:
                if isinstance(t, torch.Tensor) and leaf(t) and id(t) not in found:
                    found[id(t)] = (key, t)
    return dict(found.values())


class _Watch:
    def __init__(self, path: str, truth: Training):
        self.path, self.truth = path, truth
        self.flags: dict[int, tuple[torch.Tensor, bool]] = {}  # id -> (param, requires_grad when last looked)
        self.line = 0
        self.before: dict[str, torch.Tensor] = {}
        self.inside = False

    # ---- requires_grad, line by line
    def tracer(self, frame, event, arg):
        if frame.f_code.co_filename != self.path:
            return None
        self._look(frame)
        self.line = frame.f_lineno
        return self._local

    def _local(self, frame, event, arg):
        self._look(frame)
        if event == "return":  # back in the caller's line, if it is the script's own
            caller = frame.f_back
            self.line = caller.f_lineno if caller is not None and caller.f_code.co_filename == self.path else 0
        else:
            self.line = frame.f_lineno
        return self._local

    def _look(self, frame) -> None:
        """Every parameter the script's frames name now: one whose requires_grad changed since the last look
        changed in the line that was running."""
        for scope in scopes(self.path, frame):
            for v in list(scope.values()):
                if isinstance(v, torch.nn.Module):
                    for p in v.parameters():
                        was = self.flags.get(id(p))
                        if was is not None and was[1] != p.requires_grad:
                            self.truth.flags.setdefault(id(p), []).append((self.line, p.requires_grad))
                        self.flags[id(p)] = (p, p.requires_grad)

    # ---- backward() and step()
    def backward(self, real):
        def watched(*args, **kwargs):
            if self.inside:  # a reentrant checkpoint's own backward, inside the script's: not a call of its own
                return real(*args, **kwargs)
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename != self.path:
                frame = frame.f_back
            params = named_params(self.path, frame)
            before = {k: None if t.grad is None else t.grad.clone() for k, t in params.items()}
            roots = args[0] if args else kwargs.get("tensors")
            root = roots if isinstance(roots, torch.Tensor) else roots[0]
            loss = float(root.detach()) if root.numel() == 1 else None
            self.truth.ids.update({k: id(t) for k, t in params.items()})
            self.inside = True
            try:
                return real(*args, **kwargs)
            finally:
                self.inside = False
                got = {k for k, t in params.items() if t.grad is not None and
                       (before[k] is None or not torch.equal(before[k], t.grad))}
                self.truth.backwards.append(Backward(
                    frame.f_lineno, loss, {k: t.requires_grad for k, t in params.items()}, got,
                    {k: t.grad.clone() for k, t in params.items() if t.grad is not None}))
        return watched

    def pre_step(self, optimizer, args, kwargs):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.path:
            frame = frame.f_back
        self.params = named_params(self.path, frame)
        self.before = {k: t.detach().clone() for k, t in self.params.items()}
        self.had_grad = {k for k, t in self.params.items() if t.grad is not None}

    def post_step(self, optimizer, args, kwargs):
        changed = {k for k, t in self.params.items() if not torch.equal(self.before[k], t.detach())}
        self.truth.steps.append(Step(changed, self.had_grad))


def watch_training(path: Path, args: list[str] = ()) -> Training:
    """Run the script plainly; what torch did, call by call. An error the script raises is kept in `.error`."""
    path_s = str(path.resolve())
    truth = Training()
    watch = _Watch(path_s, truth)
    real = torch.autograd.backward
    saved = sys.argv, list(sys.path)
    hooks = [register_optimizer_step_pre_hook(watch.pre_step),
             register_optimizer_step_post_hook(watch.post_step)]
    torch.autograd.backward = watch.backward(real)
    sys.settrace(watch.tracer)
    try:
        sys.argv, sys.path[:0] = [path_s, *args], [str(path.resolve().parent)]
        runpy.run_path(path_s, run_name="__main__")
    except Exception as err:  # the script's own failure, as python would report it
        truth.error = err
    finally:
        sys.settrace(None)
        torch.autograd.backward = real
        for h in hooks:
            h.remove()
        sys.argv, sys.path[:] = saved
    return truth
