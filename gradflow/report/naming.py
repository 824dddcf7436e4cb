"""Naming a trace's parameters and modules (inspect's report): {first name: [tensor, alias, ...]} and each
module's dotted name, as torch's named_parameters/named_modules give them."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gradflow.errors import GradflowError

if TYPE_CHECKING:  # the tracer imports the report, which imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


def name_modules(roots: list, bases: list[str] | None = None) -> tuple[dict[str, list], dict[int, str]]:
    """The parameters ({first name: [tensor, alias, alias…]}: tied weights appear once, with their other names)
    and modules (id -> dotted name, the first one) of `roots`, named as torch's named_parameters and
    named_modules name them, in one walk. `bases`: each root's own name (a script's variable: `model.fc1.weight`;
    '': named inside the root, as inspect names a model's), else its class's when there are several roots."""
    named: dict[str, list] = {}
    by_id: dict[int, list] = {}  # id(tensor) -> its list in `named`
    names: dict[int, str] = {}
    for root, base in zip(roots, bases or [type(root).__name__ if len(roots) > 1 else "" for root in roots]):
        for name, m in root.named_modules(remove_duplicate=False):  # a shared module under each of its names
            prefix = f"{base}.{name}" if base and name else name or base
            names.setdefault(id(m), prefix or type(root).__name__)
            for full, p in m.named_parameters(prefix=prefix, recurse=False, remove_duplicate=False):
                seen = by_id.get(id(p))
                if seen is None:
                    by_id[id(p)] = named[full] = [p]
                else:
                    seen.append(full)
    return named, names


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
        return {k: [v] for k, v in params.items()}, name_modules(trace.state.roots)[1]
    else:
        raise GradflowError("bad_params", f"params must be a Module or a dict of tensors, "
                            f"not {type(params).__name__}", hint="t.explain(loss, params=model)")
    named, module_names = name_modules(roots)
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
