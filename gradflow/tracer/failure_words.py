"""The user's own words for a failure: the name a line gives a tensor (`h` in `h[:, 0] = 0`), the line's source,
the names their frames give tensors, and the fix spelled for the write they made (tracer/failures.py)."""
from __future__ import annotations

import ast
import linecache
from dataclasses import asdict, dataclass, field

import torch

from gradflow.tracer.failure_log import Write


def source_of(line: str | None) -> str:
    """The source text at `file:line` (empty when unknown)."""
    if not line or ":" not in line:
        return ""
    path, _, number = line.rpartition(":")
    linecache.checkcache(path)  # a file edited (or another of the same relative name) since python last read it
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
        call = _out_of_place(stmt, write.name)
        return (f"use the out-of-place `{write.name[:-1]}` (`{t} = {call or f'{t}.{write.name[:-1]}(...)'}`), or "
                f"`{t}.clone()` first")
    return f"drop `out=` (assign the result: `{t} = ...`), or clone `{t}` before the write"


def _out_of_place(stmt, name: str) -> str | None:
    """The statement's call of the in-place `name` written out of place (`h.mul_(2)` -> `h.mul(2)`)."""
    for node in ast.walk(stmt) if stmt is not None else ():
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            func = node.func
            if (func.attr if isinstance(func, ast.Attribute) else func.id) == name:
                if isinstance(func, ast.Attribute):
                    func = ast.Attribute(func.value, name[:-1], ast.Load())
                else:
                    func = ast.Name(name[:-1], ast.Load())
                return ast.unparse(ast.Call(func, node.args, node.keywords))
    return None


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


# ---- the explanation ----------------------------------------------------------------------------------------
def _spell_call(call: dict) -> str:
    where = call.get("line") or "?"
    if call.get("library_line"):
        where = f"{call['library_line']} (from {where})" if call.get("line") else call["library_line"]
    arg = f", argument `{call['argument']}`" if call.get("argument") else ""
    return f"{call['op']} at {where}{arg}  {source_of(call.get('line'))}".rstrip()


_WHAT = {"inplace_saved": "a tensor saved for backward was changed in place",
         "graph_freed": "backward ran through a graph that an earlier backward() freed",
         "leaf_inplace": "an in-place op on a leaf that requires grad",
         "nonleaf_grad": ".grad of a tensor that is not a leaf is None",
         "checkpoint_no_grad": "a reentrant checkpoint whose inputs do not require grad recorded nothing for "
                               "backward",
         "no_derivative": "an op has no derivative for one of its arguments",
         "function_grads": "a custom autograd.Function's backward returned the wrong gradients"}


@dataclass
class BackwardFailure:
    """What went wrong, where, and the fix. Lines are `file:line` of the user's code."""

    kind: str  # a key of _WHAT
    tensor: str | None  # the tensor, as the user named it (None: no name found)
    fix: str
    saved_by: dict | None = None  # {"op": ..., "line": ...}: the op whose backward needed the tensor
    modified_at: list[str] = field(default_factory=list)
    freed_by: str | None = None  # the earlier backward() that freed the graph
    freed_call: int | None = None  # ... the how-manieth backward() call of the run it was (1, 2, ...)
    made_by: dict | None = None  # nonleaf_grad: {"op": ..., "line": ...}
    call: dict | None = None  # the call at fault: {"op", "line", "library_line"} of a checkpoint; {"op", "line",
    #                           "argument"} of an op without a derivative or a custom Function's bad backward
    message: str = ""  # torch's own

    @property
    def what(self) -> str:
        return _WHAT[self.kind]

    def describe(self) -> str:
        """The explanation as lines of text (the CLI prints them before torch's message)."""
        return "\n".join([f"why backward failed: {self.what}", *self.details()])

    def details(self) -> list[str]:
        """The tensor, the lines and the fix, one a line, indented."""
        out = []
        if self.tensor:
            out.append(f"  tensor:      {self.tensor}")
        if self.saved_by:
            out.append(f"  saved by:    {self.saved_by['op']} at {self.saved_by['line']}")
        if self.made_by:
            out.append(f"  made by:     {self.made_by['op']} at {self.made_by['line']}")
        if self.call:
            out.append(f"  call:        {_spell_call(self.call)}")
        for i, line in enumerate(self.modified_at):
            out.append(f"  {'modified at:' if i == 0 else '            '} {line}  {source_of(line)}".rstrip())
        if self.freed_by:
            call = f" (backward() call {self.freed_call})" if self.freed_call else ""
            out.append(f"  freed by:    the backward() at {self.freed_by}{call}  {source_of(self.freed_by)}".rstrip())
        out.append(f"  fix:         {self.fix}")
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("message")
        return d
