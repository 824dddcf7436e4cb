"""Naming a trace's parameters and modules (inspect's report): {first name: [tensor, alias, ...]} and each
module's dotted name, as torch's named_parameters/named_modules give them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gradflow.errors import GradflowError

if TYPE_CHECKING:  # the tracer imports the report, which imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


def _module_names(roots: list, bases: list[str] | None = None) -> dict[int, str]:
    """id(module) -> its dotted name; `bases`: each root's own name (a script's variable), else its class's when
    there are several roots."""
    names: dict[int, str] = {}
    bases = bases or _bases(roots)
    for root, base in zip(roots, bases):
        for name, m in root.named_modules():
            names.setdefault(id(m), f"{base}.{name}" if base and name else name or base or type(root).__name__)
    return names


def _bases(roots: list) -> list[str]:
    return [type(root).__name__ if len(roots) > 1 else "" for root in roots]


def _named_from_modules(roots: list, bases: list[str] | None = None) -> dict[str, list]:
    """{first name: [tensor, alias, alias…]} — tied weights appear once, with their other names."""
    named: dict[str, list] = {}
    by_id: dict[int, list] = {}  # id(tensor) -> its list in `named`
    for root, base in zip(roots, bases or _bases(roots)):
        for name, p in root.named_parameters(remove_duplicate=False):
            full = f"{base}.{name}" if base else name
            seen = by_id.get(id(p))
            if seen is None:
                by_id[id(p)] = named[full] = [p]
            else:
                seen.append(full)
    return named


def name_modules(roots: list, bases: list[str]) -> tuple[dict[str, list], dict[int, str]]:
    """The parameters ({first name: [tensor, alias…]}) and modules (id -> name) of `roots`, each root named by its
    base (`model`: `model.fc1.weight`; '': named inside the root, as inspect names a model's)."""
    return _named_from_modules(roots, bases), _module_names(roots, bases)


def resolve_params(trace: Trace, params) -> tuple[dict[str, list], dict[int, str]]:
    """params: a Module, a dict of named tensors, or None (the modules the trace saw called)."""
    if issubclass(type(params), torch.nn.Module):  # type(): isinstance would ask the object's own __class__
        roots = [params]
    elif params is None:
        roots = trace.state.roots
    elif isinstance(params, dict):
        bad = [k for k, v in params.items() if not isinstance(v, torch.Tensor)]
        if bad:
            raise GradflowError("bad_params", f"params[{bad[0]!r}] is not a tensor",
                                hint="pass a Module or a dict of name -> tensor")
        return {k: [v] for k, v in params.items()}, _module_names(trace.state.roots)
    else:
        raise GradflowError("bad_params", f"params must be a Module or a dict of tensors, "
                            f"not {type(params).__name__}", hint="t.explain(loss, params=model)")
    named, module_names = _named_from_modules(roots), _module_names(roots)
    if params is None:
        _add_stray_leaves(trace, named)
    return named, module_names


def _add_stray_leaves(trace: Trace, named: dict[str, list]):
    """Leaf tensors that require grad and were used, but belong to no module: name them by line."""
    known = {id(v[0]) for v in named.values()}
    for t, serial in trace.used_leaves():
        if id(t) not in known:
            first = next(u for u in trace.state.uses if u.serial == serial)
            named[f"tensor@{trace.ops[first.op].line or serial}"] = [t]
            known.add(id(t))
