"""The truth for `gradflow script --autograd`, in plain torch: no gradflow here.

`backward_graphs(path)` runs a script as `python FILE.py` runs it (runpy, as __main__), with Tensor.backward
wrapped: before each backward runs, it walks torch's graph from the tensor's grad_fn through `next_functions`
(as torch documents it) and names the AccumulateGrad leaves by the variables of the calling frame and the
script's globals (a module's parameters as `model.fc.weight`). Not collected by pytest (no test_ prefix).
"""
import runpy
import sys
from collections import Counter

import torch

from ..render.plain_op_graphs import walk  # (plain torch too)


def names_in(frame) -> dict[int, str]:
    """id(tensor) -> its first name in the frame's locals, then the module's globals."""
    names: dict[int, str] = {}
    for scope in (frame.f_locals, frame.f_globals):
        for var, v in list(scope.items()):
            if isinstance(v, torch.nn.Module):
                for name, p in v.named_parameters(prefix=var):
                    names.setdefault(id(p), name)
            elif isinstance(v, torch.Tensor):
                names.setdefault(id(v), var)
    return names


def frozen_in(frame) -> set[str]:
    """The parameters of the frame's modules that do not require grad."""
    return {name for scope in (frame.f_locals, frame.f_globals) for var, v in list(scope.items())
            if isinstance(v, torch.nn.Module) for name, p in v.named_parameters(prefix=var) if not p.requires_grad}


def graph_of(loss, frame) -> dict:
    nodes, edges = walk(loss)
    names = names_in(frame)
    leaves = {names.get(id(n.variable), "?") for n in nodes if type(n).__name__ == "AccumulateGrad"}
    return {"kinds": Counter(type(n).__name__ for n in nodes),
            "edges": Counter((type(a).__name__, type(b).__name__) for a, b in set(edges)),
            "leaves": leaves, "frozen": frozen_in(frame), "line": frame.f_lineno}


def backward_graphs(path, args=()) -> list[dict]:
    """Each backward()'s graph, in the order the script calls them."""
    found = []
    original = torch.Tensor.backward

    def backward(self, *a, **k):
        found.append(graph_of(self, sys._getframe(1)))
        return original(self, *a, **k)

    saved = sys.argv
    sys.argv = [str(path), *args]
    torch.Tensor.backward = backward
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        torch.Tensor.backward = original
        sys.argv = saved
    return found


def marked_lines(path, mark: str = "# cut") -> list[int]:
    """The lines of the script that carry `mark` (the hand-written truth of where its cuts are)."""
    return [i for i, line in enumerate(open(path).read().splitlines(), 1) if mark in line]
