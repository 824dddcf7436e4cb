"""The `gradflow eval` program that reproduces one backward() of a script, spelled from the recorded ops.

Each op that computed the loss is written in gradflow's language: + - * / ^ @, unary -, the functions of
language/ops.py, detach(...) for detach()/.data, no_grad(...) / inference_mode(...) for ops run under those
contexts. The tensors the script named become statements (`out1 = xvar*y1`) or variables given on the command
line with the values the script used (`--xvar "[1]"`); the leaves that require grad are `--wrt`. An op with no
spelling (one the op table lacks, an argument its row does not take) gives a `NoProgram` that says which op and where:
never a program that computes something else. The program is compiled before it is offered.
"""
from __future__ import annotations

import math
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gradflow.errors import GradflowError
from gradflow.language.compile import compile_program
from gradflow.report.reasons import SHOWN_CUTS
from gradflow.script.spelling import (
    ATOM,
    PRODUCT,
    SUM,
    UNARY,
    Expr,
    NoSpelling,
    clean_name,
    float_text,
    number,
    spell,
    unique,
    value_text,
)

# The recorder (script/recorder.py: ScriptTrace, Named) imports this module: its objects are read here untyped.
ScriptTrace = Any
Named = Any

VALUE_CAP = 64  # elements: larger values are not recorded, nor written on a command line


@dataclass(frozen=True, slots=True)
class Ref:
    """A tensor argument of a recorded op, as it was at that moment."""

    serial: int
    version: int  # index of the op that last wrote this tensor before the use (-1: none recorded)
    leaf: bool  # no grad_fn at the use (a leaf, a constant, or the output of a cut)
    requires_grad: bool
    value: int | None  # index into the recorder's values: a copy made at the use (no grad_fn, small only)


@dataclass(frozen=True, slots=True)
class Opaque:
    """An argument that is neither a tensor nor a number (a list, a dtype, a slice...)."""

    what: str


@dataclass(slots=True)
class Call:
    """The arguments of one recorded op, and facts about its first output."""

    args: tuple
    kwargs: dict
    grad_fn: str | None  # type name of the output's grad_fn
    same_meta: bool  # output has the input's dtype and shape (`.float()` on a float32 tensor is an identity)
    tensors: tuple[tuple[int, int | None], ...] = ()  # (serial, memory) of its inputs and outputs (script/writes.py)


@dataclass
class Program:
    """A gradflow eval command line that computes the same loss and the same grads."""

    source: str
    values: list[tuple[str, str]]  # (variable, value text) in order of first use
    wrt: list[str]
    dtype: str | None = None  # "float64" when the script computed in float64

    def argv(self, options: Collection[str] = ()) -> list[str]:
        """Arguments after `gradflow`; a variable named like an eval option goes through --var."""
        args = ["eval", self.source]
        for name, text in self.values:
            args += ["--var", f"{name}={text}"] if name in options else (
                [f"--{name}={text}"] if text.startswith("-") else [f"--{name}", text])
        args += ["--wrt", ",".join(self.wrt)]
        return args + (["--dtype", self.dtype] if self.dtype else [])

    def command(self, options: Collection[str] = ()) -> str:
        return "gradflow " + shlex.join(self.argv(options))

    def explain(self):
        """The program explained, as `gradflow eval` would (its table and picture are the backward's)."""
        from gradflow.engine.explain import explain

        return explain(self.source, values=dict(self.values), wrt=self.wrt, dtype=self.dtype or "float32")


@dataclass
class NoProgram:
    """Why this backward cannot be written as a gradflow program."""

    reason: str


def build_program(trace: ScriptTrace, roots: list[Ref], grads: list[Ref | None], named: list[Named],
                  inputs=None) -> Program | NoProgram:
    """The program for backward() from `roots` (with `grads` as torch's gradient arguments), or why not."""
    try:
        return _Writer(trace, named).write(roots, grads, inputs)
    except NoSpelling as why:
        return NoProgram(str(why))
    except RecursionError:
        return NoProgram("the computation is too deeply nested to write as one program")


class _Writer:
    def __init__(self, trace: ScriptTrace, named: list[Named]):
        self.t = trace
        self.names: dict[int, str] = {}  # serial -> its name in the program
        used: set[str] = set()
        for n in named:
            if n.serial is not None and n.serial not in self.names:
                self.names[n.serial] = unique(clean_name(n.name), used)
        self.used = used
        self.refs: dict[tuple, int] = {}  # node key -> times referenced
        self.statements: dict[tuple, tuple[str, str]] = {}  # node key -> (name, expression), in order
        self.variables: dict[tuple, tuple[str, Ref]] = {}  # value key -> (name, ref)
        self.nodes: dict[tuple, bool] = {}  # _is_node, remembered
        self.spelled: set[int] = set()  # the recorded ops the program writes (their tensors: no write behind them)

    # ---- the whole program --------------------------------------------------------------------
    def write(self, roots: list[Ref], grads: list[Ref | None], inputs) -> Program:
        for r in roots:
            self._count(r)
        terms = []
        for r, g in zip(roots, grads):
            expr = self._ref(r, None)
            terms.append(expr.at(SUM + 1) if g is None else f"sum({expr.at(PRODUCT)}*{self._ref(g, None).at(UNARY)})")
        last = " + ".join(terms)
        body = [f"{name} = {expr}" for name, expr in self.statements.values()]
        if not body or last != body[-1].split(" = ")[0]:
            body.append(last)
        return self._finish("; ".join(body), inputs)

    def _finish(self, source: str, inputs) -> Program:
        values, wrt, dtypes = [], [], set()
        wanted = None if inputs is None else {self.t.known(t) for t in _as_list(inputs)}
        for name, ref in self.variables.values():
            value = self.t.values[ref.value] if ref.value is not None else None
            if value is None:
                raise NoSpelling(f"the value of {name} is not recorded (more than {VALUE_CAP} elements, or not a "
                                 "dense real tensor)")
            values.append((name, value_text(value)))
            dtypes.add(str(value.dtype).removeprefix("torch."))
            if ref.requires_grad and (wanted is None or ref.serial in wanted):
                wrt.append(name)
        if not wrt:
            raise NoSpelling("no leaf of it requires grad")
        self._unwritten()
        floats = {d for d in dtypes if d.startswith(("float", "bfloat"))}
        if floats - {"float32", "float64"} or len(floats) > 1:
            raise NoSpelling(f"it computes in {', '.join(sorted(floats))}; gradflow eval uses float32 or float64")
        try:
            compile_program(source)
        except GradflowError as err:
            raise NoSpelling(f"the program does not compile in gradflow's language ({err.message})") from None
        return Program(source, values, wrt, "float64" if floats == {"float64"} else None)

    def _unwritten(self) -> None:
        """No write into the memory of a tensor the program's ops use, after the op, other than the versions the
        program follows (script/writes.py): the backward would use values the program does not compute."""
        line = self.t.writes.through_numpy(st for i in self.spelled for _, st in self.t.calls[i].tensors)
        if line is not None:
            raise NoSpelling(f"the numpy array `.numpy()` gave at {line} shares the memory of a tensor the "
                             "program uses, and its values changed since: writes through it are not torch ops, "
                             "so the program would not compute what this backward used (take .numpy() of a "
                             ".clone(), or write to the tensor with torch)")
        hit = self.t.writes.conflict((i, self.t.calls[i].tensors) for i in sorted(self.spelled))
        if hit is not None:
            rec = self.t.ops[hit[0]]
            where = f" at {rec.line}" if rec.line else ""
            raise NoSpelling(f"{hit[1].describe()} wrote in place into a tensor that `{rec.name}`{where} made or "
                             "used, after it ran: this backward used values the program would not compute (to follow "
                             "the change, write it out of place, `y = y + 1`, or clone() before writing)")

    # ---- references: count, then write ----------------------------------------------------------
    def _is_node(self, r: Ref) -> bool:
        """Written as an expression, not a value: it has a grad_fn, comes from a cut, or is computed from one."""
        if not r.leaf:
            return True
        if r.requires_grad or r.version < 0:
            return False
        key = (r.serial, r.version)
        if key not in self.nodes:
            call = self.t.calls.get(r.version)
            self.nodes[key] = self.t.ops[r.version].cut in SHOWN_CUTS or call is not None and any(
                self._is_node(a) for a in _refs(call))
        return self.nodes[key]

    def _count(self, r: Ref):
        if not self._is_node(r):
            return
        key = (r.serial, r.version)
        self.refs[key] = self.refs.get(key, 0) + 1
        call = self.t.calls.get(r.version)
        if self.refs[key] == 1 and call is not None:
            for a in _refs(call):
                self._count(a)

    def _ref(self, r: Ref, region: str | None) -> Expr:
        if not self._is_node(r):
            return self._value(r)
        key = (r.serial, r.version)
        if key in self.statements:
            return Expr(self.statements[key][0], ATOM)
        try:
            named = self.names.get(r.serial) if self._current(r) else None
            if named is None and self.refs.get(key, 0) < 2:
                return self._op(r, region)
            expr = self._op(r, None)
        except NoSpelling:
            if r.leaf and r.value is not None:  # no gradient flows through it: its value says it all
                return self._value(r)
            raise
        name = named or unique("t1", self.used)
        self.statements[key] = (name, expr.text)
        return Expr(name, ATOM)

    def _current(self, r: Ref) -> bool:
        """Is this the version of the tensor that its name points to now (no later in-place write)?"""
        return self.t.writer.get(r.serial, -1) == r.version

    def _value(self, r: Ref) -> Expr:
        if r.value is not None and not r.requires_grad and r.serial not in self.names:
            v = self.t.values[r.value]
            if v.dim() == 0 and math.isfinite(float(v)):
                return number(float_text(float(v), v.dtype))
        key = ("value", r.serial, r.value)
        if key not in self.variables:
            own = self.names.get(r.serial) if r.value == self.t.latest.get(r.serial) else None
            self.variables[key] = (own or unique("v1", self.used), r)
        return Expr(self.variables[key][0], ATOM)

    # ---- one op ---------------------------------------------------------------------------------
    def _op(self, r: Ref, region: str | None) -> Expr:
        if r.version < 0 or r.version not in self.t.calls:
            raise NoSpelling("a tensor it uses was made by code gradflow cannot see (no recorded op)")
        rec, call = self.t.ops[r.version], self.t.calls[r.version]
        where = f" at {rec.line}" if rec.line else ""
        own = "inference_mode" if rec.inference else None if rec.grad_enabled else "no_grad"
        if not r.leaf and call.grad_fn is None:
            raise NoSpelling(f"`{rec.name}`{where} made a tensor with a grad_fn gradflow did not see")
        if not r.leaf and own is not None:  # an in-place write with gradients off into a tensor that needs them
            raise NoSpelling(f"`{rec.name}`{where} changed a tensor that requires grad with gradients off: its "
                             "backward is the one it had before, with the new values")
        args = call.args
        expr = None if len(rec.outs) != 1 else spell(  # an argument by position (int) or keyword (str)
            rec.name, args, call.kwargs, call.same_meta, lambda i: self._arg(_at(call, i), own),
            lambda i: _is_ref(_at(call, i)))
        if expr is None:
            raise NoSpelling(f"`{rec.name}`{where} has no spelling in gradflow's language")
        self.spelled.add(r.version)
        return Expr(f"{own}({expr.text})", ATOM) if own is not None and own != region else expr

    def _arg(self, a, region: str | None) -> Expr:
        if _is_ref(a):
            return self._ref(a, region)
        if isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a):
            return number(a)
        raise NoSpelling(f"an argument ({getattr(a, 'what', type(a).__name__)}) has no spelling")


# ---- helpers --------------------------------------------------------------------------------------
def _is_ref(a) -> bool:
    return isinstance(a, Ref)


def _at(call, where: int | str):
    return call.args[where] if isinstance(where, int) else call.kwargs[where]


def _refs(call) -> list:
    return [a for a in (*call.args, *call.kwargs.values()) if _is_ref(a)]


def _as_list(inputs) -> list:
    if isinstance(inputs, dict):
        return list(inputs.values())
    return [inputs] if type(inputs).__name__ == "Tensor" or hasattr(inputs, "grad_fn") else list(inputs)
