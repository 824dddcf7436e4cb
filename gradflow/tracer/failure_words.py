"""The user's own words for a failure: the name a line gives a tensor (`h` in `h[:, 0] = 0`), the line's source,
the names their frames give tensors, and the fix spelled for the write they made (tracer/failures.py)."""
from __future__ import annotations

import ast
import linecache

import torch

from gradflow.tracer.failure_log import Write


def source_of(line: str | None) -> str:
    """The source text at `file:line` (empty when unknown)."""
    if not line or ":" not in line:
        return ""
    path, _, number = line.rpartition(":")
    return linecache.getline(path, int(number)).strip() if number.isdigit() else ""


def _statement(line: str | None) -> ast.stmt | None:
    text = source_of(line)
    try:
        body = ast.parse(text).body
    except SyntaxError:  # a line inside a longer statement
        return None
    return body[0] if body else None


def named_at(line: str | None, assigned: bool = False, grad: bool = False) -> str | None:
    """The tensor a line writes in place (`x += 1`, `h[:, 0] = 0`, `x.relu_()`, `torch.add(a, b, out=x)`), or with
    `assigned` the name it assigns (`y = x.sigmoid()`), or with `grad` the tensor whose `.grad` it reads."""
    stmt = _statement(line)
    if stmt is None:
        return None
    if grad:
        found = [n.value for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and n.attr == "grad"]
        return ast.unparse(found[0]) if found else None
    if assigned:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            return ast.unparse(stmt.targets[0])
        return None
    if isinstance(stmt, ast.AugAssign):
        return ast.unparse(stmt.target)
    if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Subscript):
        return ast.unparse(stmt.targets[0].value)
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            out = [k.value for k in node.keywords if k.arg == "out"]
            if out:
                return ast.unparse(out[0])
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr.endswith("_") and not f.attr.endswith("__"):
                return ast.unparse(f.value)
    return None


def recurrent_name(lines: list[str | None]) -> str | None:
    """The name a recurrence updates (`hidden = cell(x, hidden)`, `h = h @ W + x`) on the first of these lines that
    assigns a name it also reads."""
    for line in dict.fromkeys(lines):
        stmt = _statement(line)
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target = stmt.targets[0].id
            if any(isinstance(n, ast.Name) and n.id == target for n in ast.walk(stmt.value)):
                return target
    return None


def fix_for_write(write: Write, name: str | None) -> str:
    """The fix for a write that changed a tensor backward still needed."""
    t = name or "the tensor"
    if write.optimizer:
        return ("call optimizer.step() after backward() (move the write): the step changed parameters the "
                "graph still needed")
    stmt = _statement(write.line)
    if isinstance(stmt, ast.AugAssign):
        op = ast.unparse(ast.BinOp(stmt.target, stmt.op, stmt.value))
        return f"write `{t} = {op}` (a new tensor) instead of `{ast.unparse(stmt)}`"
    if write.name == "__setitem__" or isinstance(stmt, ast.Assign):
        return (f"write into a copy: `{t} = {t}.clone()` before `{source_of(write.line)}`, or move the write "
                "after backward()")
    if write.name.endswith("_") and not write.name.endswith("__"):
        return f"use the out-of-place `{write.name[:-1]}` (`{t} = {t}.{write.name[:-1]}()`), or `{t}.clone()` first"
    return f"drop `out=` (assign the result: `{t} = ...`), or clone `{t}` before the write"


def tensor_names(frames: list) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every tensor the frames name in their locals and globals, innermost frame first."""
    return _named(frames, torch.Tensor)


def parameter_name(frames: list, storage: int) -> str | None:
    """`model.2.weight`: the parameter with this storage, named through a module the frames name."""
    for name, value in _named(frames, torch.nn.Module):
        for pname, p in value.named_parameters():
            if p.untyped_storage().data_ptr() == storage:
                return f"{name}.{pname}"
    return None


def _named(frames: list, kind: type) -> list:
    found, ids = [], set()
    for frame in reversed(frames):
        for scope in (frame.f_locals, frame.f_globals):
            for name, value in list(scope.items()):
                if isinstance(value, kind) and id(value) not in ids and not name.startswith("_"):
                    ids.add(id(value))
                    found.append((name, value))
    return found
