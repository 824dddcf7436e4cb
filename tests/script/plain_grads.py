"""The oracle for `gradflow script`'s programs: a script run by plain torch, with what each backward() added to
the .grad of every leaf the script names. It does not import gradflow.

`grads_per_backward(path)` runs the file as `python FILE.py` would (as `__main__`) with torch.autograd.backward
wrapped (Tensor.backward calls it): before and after each call, the .grad of each leaf that requires grad, found
by name in the calling frames of the script and its globals (a module's parameters as `model.weight`, a list's
elements as `params[0]`), as gradflow names them.
"""
import runpy
import sys

import torch


def scopes(path: str, frame) -> list[dict]:
    """The locals of the script's frames from `frame` out, the module's (its globals) last."""
    out = []
    while frame is not None:
        if frame.f_code.co_filename == path:
            out.append(frame.f_locals)
            if frame.f_code.co_name == "<module>":
                break
        frame = frame.f_back
    return out


def _named_leaves(path: str, frame) -> dict:
    found = {}
    for scope in scopes(path, frame):
        for name, v in list(scope.items()):
            pairs = [(name, v)] if isinstance(v, torch.Tensor) else \
                list(v.named_parameters(prefix=name)) if isinstance(v, torch.nn.Module) else \
                [(f"{name}[{i}]", t) for i, t in enumerate(v)] if isinstance(v, (list, tuple)) else []
            for key, t in pairs:
                if isinstance(t, torch.Tensor) and leaf(t) and t.requires_grad and id(t) not in found:
                    found[id(t)] = (key, t)
    return dict(found.values())


def leaf(t) -> bool:
    try:
        return t.is_leaf
    except RuntimeError:  # a view made under no_grad, then written in place: torch will not say; not a leaf
        return False


def grads_per_backward(path: str) -> list[dict]:
    """Per backward() call: leaf name -> what the call added to its .grad (None: its .grad is still None); None
    for a call that raised."""
    calls: list = []
    real = torch.autograd.backward

    def watched(*args, **kwargs):
        leaves = _named_leaves(path, sys._getframe(1))
        before = {k: None if t.grad is None else t.grad.clone() for k, t in leaves.items()}
        try:
            result = real(*args, **kwargs)
        except RuntimeError:
            calls.append(None)
            raise
        calls.append({k: None if t.grad is None else t.grad - before[k] if before[k] is not None else t.grad.clone()
                      for k, t in leaves.items()})
        return result

    saved = sys.argv, list(sys.path)
    torch.autograd.backward = watched
    try:
        sys.argv, sys.path[:0] = [path], [str(__import__("pathlib").Path(path).parent)]
        runpy.run_path(path, run_name="__main__")
    finally:
        torch.autograd.backward = real
        sys.argv, sys.path[:] = saved
    return calls
