"""Naming a trace's parameters and modules (inspect's report): {first name: [tensor, alias, ...]} and each
module's dotted name, as torch's named_parameters/named_modules give them, from one walk when the modules spell
those the usual way."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gradflow.errors import GradflowError

if TYPE_CHECKING:  # the tracer imports the report, which imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


def _module_names(roots: list) -> dict[int, str]:
    names: dict[int, str] = {}
    prefix = len(roots) > 1
    for root in roots:
        base = type(root).__name__ if prefix else ""
        for name, m in root.named_modules():
            full = ".".join(x for x in (base, name) if x)
            names.setdefault(id(m), full or type(root).__name__)
    return names


def _named_from_modules(roots: list) -> dict[str, list]:
    """{first name: [tensor, alias, alias…]} — tied weights appear once, with their other names."""
    by_id: dict[int, list] = {}
    prefix = len(roots) > 1
    for root in roots:
        base = type(root).__name__ + "." if prefix else ""
        for name, p in root.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), [p]).append(base + name)
    return {v[1]: [v[0], *v[2:]] for v in by_id.values()}


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
    named, module_names = _names(roots)
    if params is None:
        _add_stray_leaves(trace, named)
    return named, module_names


def _names(roots: list) -> tuple[dict[str, list], dict[int, str]]:
    """(_named_from_modules(roots), _module_names(roots)) from one walk of the modules, as nn.Module's own
    named_parameters walks them; the two walks when a root spells named_parameters / named_modules its own way."""
    plain = torch.nn.Module
    if any(type(r).named_parameters is not plain.named_parameters or type(r).named_modules is not
           plain.named_modules for r in roots):
        return _named_from_modules(roots), _module_names(roots)
    named: dict[str, list] = {}
    by_id: dict[int, list] = {}
    names: dict[int, str] = {}
    prefix = len(roots) > 1
    for root in roots:
        base = type(root).__name__ if prefix else ""
        names.setdefault(id(root), base or type(root).__name__)
        if not _walk(root, base, named, by_id, names):  # a submodule spells named_modules its own way
            return _named_from_modules(roots), _module_names(roots)
    return named, names


def _walk(module, full: str, named: dict, by_id: dict, names: dict, depth: int = 0) -> bool:
    """named_modules(remove_duplicate=False) and each module's own parameters, in torch's order, without a
    generator per module (a model of many small layers made one per module), straight into
    _named_from_modules's answer ({first name: [tensor, alias, ...]}); False if a submodule overrides
    named_modules (then torch's own walk is the truth). A module seen before keeps its first name (a root's is
    set by _names)."""
    names.setdefault(id(module), full)
    own = module._parameters
    children = module._modules
    if not own and not children:  # (most modules own no parameters or no submodules: no iterator made over an
        return True  # empty dict, and a leaf such as GELU no prefix either)
    pre = full + "." if full else ""  # (names joined by `+`: ~5% of the walk less than f-strings and one id() each)
    if own:
        for k, p in own.items():
            if p is not None:
                i = id(p)
                if i not in by_id:
                    by_id[i] = named[pre + k] = [p]
                else:
                    by_id[i].append(pre + k)
    if children:
        for k, m in children.items():
            if m is None:
                continue
            if type(m).named_modules is not _PLAIN_NAMED_MODULES or depth > 200:
                return False
            if not _walk(m, pre + k, named, by_id, names, depth + 1):
                return False
    return True


_PLAIN_NAMED_MODULES = torch.nn.Module.named_modules


def _add_stray_leaves(trace: Trace, named: dict[str, list]):
    """Leaf tensors that require grad and were used, but belong to no module: name them by line."""
    known = {id(v[0]) for v in named.values()}
    for t, serial in trace.used_leaves():
        if id(t) not in known:
            first = next(u for u in trace.state.uses if u.serial == serial)
            named[f"tensor@{trace.ops[first.op].line or serial}"] = [t]
            known.add(id(t))
