"""The `gradflow eval` program that reproduces one backward() of a script, spelled from the recorded ops.

Each op that computed the loss is written in gradflow's language: + - * / ^ @, unary -, the functions of
language/ops.py, detach(...) for detach()/.data, no_grad(...) / inference_mode(...) for ops run under those
contexts. The tensors the script named become statements (`out1 = xvar*y1`) or variables given on the command
line with the values the script used (`--xvar "[1]"`); the leaves that require grad are `--wrt`. An op with no
spelling (linear, indexing, a reduction over one dim...) gives a `NoProgram` that says which op and where:
never a program that computes something else. The program is compiled before it is offered.
"""
from __future__ import annotations

import math
import re
import shlex
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradflow.errors import GradflowError
from gradflow.inspect.reasons import SHOWN_CUTS
from gradflow.language.compile import compile_program
from gradflow.language.ops import FUNCTIONS

if TYPE_CHECKING:  # the recorder imports this module: types only, no cycle
    from gradflow.inspect.script_trace import Named, ScriptTrace

VALUE_CAP = 64  # elements: larger values are not recorded, nor written on a command line
SUM, PRODUCT, UNARY, POWER, ATOM = 1, 2, 3, 4, 5  # the grammar's precedence levels
_BINARY = {  # torch name -> (symbol, arguments swapped)
    **{n: ("+", False) for n in ("add", "__add__", "__iadd__", "add_")}, "__radd__": ("+", True),
    **{n: ("-", False) for n in ("sub", "subtract", "__sub__", "__isub__", "sub_")},
    **{n: ("-", True) for n in ("__rsub__", "rsub")},
    **{n: ("*", False) for n in ("mul", "multiply", "__mul__", "__imul__", "mul_")}, "__rmul__": ("*", True),
    **{n: ("/", False) for n in ("div", "divide", "true_divide", "__truediv__", "__itruediv__", "div_")},
    "__rtruediv__": ("/", True),
    **{n: ("@", False) for n in ("matmul", "__matmul__", "mm", "mv", "dot")}, "__rmatmul__": ("@", True),
    **{n: ("^", False) for n in ("pow", "__pow__", "__ipow__", "pow_")}, "__rpow__": ("^", True),
}
_LEVEL = {"+": SUM, "-": SUM, "*": PRODUCT, "/": PRODUCT, "@": PRODUCT, "^": POWER}
# torch's functions of one tensor that the language's functions of the same name compute exactly (a new row in
# language/ops.py is not added here by itself: torch's function of that name may take other arguments)
_ONE_TENSOR = ("exp", "log", "sqrt", "abs", "sin", "cos", "tan", "tanh", "sigmoid", "relu")
_UNARY: dict[str, str] = {name: name for name in _ONE_TENSOR if name in FUNCTIONS}
_UNARY.update({f"{name}_": name for name in list(_UNARY)} | {"__abs__": "abs", "absolute": "abs"})
_NEG = {"neg", "__neg__", "negative", "neg_"}
_DETACH = {"detach", "detach_", "data"}
_IDENTITY = {"clone", "contiguous", "__pos__", "positive"}
_IDENTITY_IF_SAME = {"float", "double", "to", "type_as", "cpu"}  # when dtype and shape do not change
_REDUCE = {"sum", "mean"}
_MINMAX = {"min": "min", "max": "max", "minimum": "min", "maximum": "max"}
_RESERVED = {"true", "false", "True", "False"}


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


@dataclass
class Program:
    """A gradflow eval command line that computes the same loss and the same grads."""

    source: str
    values: list[tuple[str, str]]  # (variable, value text) in order of first use
    wrt: list[str]
    dtype: str | None = None  # "float64" when the script computed in float64
    notes: list[str] = field(default_factory=list)

    def argv(self, options: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
        """Arguments after `gradflow`; a variable named like an eval option goes through --var."""
        args = ["eval", self.source]
        for name, text in self.values:
            args += ["--var", f"{name}={text}"] if name in options else (
                [f"--{name}={text}"] if text.startswith("-") else [f"--{name}", text])
        args += ["--wrt", ",".join(self.wrt)]
        return args + (["--dtype", self.dtype] if self.dtype else [])

    def command(self, options: set[str] = frozenset()) -> str:  # type: ignore[assignment]
        return "gradflow " + shlex.join(self.argv(options))


@dataclass
class NoProgram:
    """Why this backward cannot be written as a gradflow program."""

    reason: str


class _NoSpelling(Exception):
    pass


@dataclass
class _Expr:
    text: str
    level: int

    def at(self, level: int) -> str:
        return self.text if self.level >= level else f"({self.text})"


def build_program(trace: ScriptTrace, roots: list[Ref], grads: list[Ref | None], named: list[Named],
                  inputs=None) -> Program | NoProgram:
    """The program for backward() from `roots` (with `grads` as torch's gradient arguments), or why not."""
    try:
        return _Writer(trace, named).write(roots, grads, inputs)
    except _NoSpelling as why:
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
                self.names[n.serial] = _unique(_clean(n.name), used)
        self.used = used
        self.refs: dict[tuple, int] = {}  # node key -> times referenced
        self.statements: dict[tuple, tuple[str, str]] = {}  # node key -> (name, expression), in order
        self.variables: dict[tuple, tuple[str, Ref]] = {}  # value key -> (name, ref)
        self.nodes: dict[tuple, bool] = {}  # _is_node, remembered

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
                raise _NoSpelling(f"the value of {name} is not recorded (more than {VALUE_CAP} elements)")
            values.append((name, _value_text(value)))
            dtypes.add(str(value.dtype).removeprefix("torch."))
            if ref.requires_grad and (wanted is None or ref.serial in wanted):
                wrt.append(name)
        if not wrt:
            raise _NoSpelling("no leaf of it requires grad")
        floats = {d for d in dtypes if d.startswith(("float", "bfloat"))}
        if floats - {"float32", "float64"} or len(floats) > 1:
            raise _NoSpelling(f"it computes in {', '.join(sorted(floats))}; gradflow eval uses float32 or float64")
        try:
            compile_program(source)
        except GradflowError as err:
            raise _NoSpelling(f"the program does not compile in gradflow's language ({err.message})") from None
        return Program(source, values, wrt, "float64" if floats == {"float64"} else None)

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

    def _ref(self, r: Ref, region: str | None) -> _Expr:
        if not self._is_node(r):
            return self._value(r)
        key = (r.serial, r.version)
        if key in self.statements:
            return _Expr(self.statements[key][0], ATOM)
        try:
            named = self.names.get(r.serial) if self._current(r) else None
            if named is None and self.refs.get(key, 0) < 2:
                return self._op(r, region)
            expr = self._op(r, None)
        except _NoSpelling:
            if r.leaf and r.value is not None:  # no gradient flows through it: its value says it all
                return self._value(r)
            raise
        name = named or _unique("t1", self.used)
        self.statements[key] = (name, expr.text)
        return _Expr(name, ATOM)

    def _current(self, r: Ref) -> bool:
        """Is this the version of the tensor that its name points to now (no later in-place write)?"""
        return self.t.writer.get(r.serial, -1) == r.version

    def _value(self, r: Ref) -> _Expr:
        if r.value is not None and not r.requires_grad and r.serial not in self.names:
            v = self.t.values[r.value]
            if v.dim() == 0 and math.isfinite(float(v)):
                return _number(_float(float(v), v.dtype))
        key = ("value", r.serial, r.value)
        if key not in self.variables:
            own = self.names.get(r.serial) if r.value == self.t.latest.get(r.serial) else None
            self.variables[key] = (own or _unique("v1", self.used), r)
        return _Expr(self.variables[key][0], ATOM)

    # ---- one op ---------------------------------------------------------------------------------
    def _op(self, r: Ref, region: str | None) -> _Expr:
        if r.version < 0 or r.version not in self.t.calls:
            raise _NoSpelling("a tensor it uses was made by code gradflow cannot see (no recorded op)")
        rec, call = self.t.ops[r.version], self.t.calls[r.version]
        where = f" at {rec.line}" if rec.line else ""
        own = "inference_mode" if rec.inference else None if rec.grad_enabled else "no_grad"
        if not r.leaf and call.grad_fn is None:
            raise _NoSpelling(f"`{rec.name}`{where} made a tensor with a grad_fn gradflow did not see")
        expr = self._spell(rec.name, call, own, len(rec.outs))
        if expr is None:
            raise _NoSpelling(f"`{rec.name}`{where} has no spelling in gradflow's language")
        return _Expr(f"{own}({expr.text})", ATOM) if own is not None and own != region else expr

    def _spell(self, name: str, call, region: str | None, outs: int) -> _Expr | None:
        args, kw = call.args, call.kwargs
        arg = lambda i: self._arg(args[i], region)  # noqa: E731
        if outs != 1:
            return None
        if name in _IDENTITY_IF_SAME and call.same_meta and args:  # x.to(torch.float32) of a float32 x
            return arg(0)
        if not _plain_kwargs(name, kw):
            return None
        if name in _BINARY and len(args) == 2:
            sym, swapped = _BINARY[name]
            a, b = (arg(1), arg(0)) if swapped else (arg(0), arg(1))
            return _binary(sym, a, b)
        if len(args) == 1 and name in _IDENTITY:
            return arg(0)
        if len(args) != 1 and not (name in _MINMAX and len(args) == 2):
            return None
        if name in _NEG:
            inner = arg(0)
            return _Expr("-" + (inner.text if inner.level >= UNARY and not inner.text.startswith("-")
                                else f"({inner.text})"), UNARY)
        if name == "square":
            return _binary("^", arg(0), _Expr("2", ATOM))
        fn = _UNARY.get(name) or ("detach" if name in _DETACH else None) or (
            name if name in _REDUCE else None) or _MINMAX.get(name)
        if fn is None or fn in _MINMAX.values() and len(args) == 2 and not _is_ref(args[1]):
            return None
        return _Expr(f"{fn}({', '.join(arg(i).text for i in range(len(args)))})", ATOM)

    def _arg(self, a, region: str | None) -> _Expr:
        if _is_ref(a):
            return self._ref(a, region)
        if isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a):
            return _number(a)
        raise _NoSpelling(f"an argument ({getattr(a, 'what', type(a).__name__)}) has no spelling")


# ---- helpers --------------------------------------------------------------------------------------
def _is_ref(a) -> bool:
    return isinstance(a, Ref)


def _refs(call) -> list:
    return [a for a in (*call.args, *call.kwargs.values()) if _is_ref(a)]


def _plain_kwargs(name: str, kw: dict) -> bool:
    """Keyword arguments that change nothing: alpha=1, inplace=..., out-of-the-way Nones."""
    for key, value in kw.items():
        if value is None or key == "inplace" or key == "alpha" and value == 1 or key == "memory_format":
            continue
        return False
    return True


def _binary(sym: str, a: _Expr, b: _Expr) -> _Expr:
    level = _LEVEL[sym]
    if sym == "^":
        return _Expr(f"{a.at(ATOM)}^{b.at(UNARY)}", POWER)
    text = f"{a.at(level)} {sym} {b.at(level + 1)}" if level == SUM or sym == "@" else \
        f"{a.at(level)}{sym}{b.at(level + 1)}"
    return _Expr(text, level)


def _number(x: int | float) -> _Expr:
    text = str(x) if isinstance(x, int) else _num_text(x)
    return _Expr(text, SUM if text.startswith("-") else ATOM)  # x*(-3), not x*-3


def _num_text(x: float) -> str:
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def _float(x: float, dtype) -> float:
    """The shortest decimal that reads back as the same float32 (float64: Python's own repr)."""
    if str(dtype) != "torch.float32":
        return x
    for digits in range(6, 10):
        short = float(f"{x:.{digits}g}")
        if struct.unpack("f", struct.pack("f", short))[0] == x:
            return short
    return x


def _value_text(v) -> str:
    """A value as gradflow reads it: a number, or a JSON list ([[1,2],[3,4]])."""
    nested = v.detach().double().tolist()

    def text(x) -> str:
        if isinstance(x, list):
            return "[" + ",".join(text(y) for y in x) + "]"
        if not math.isfinite(x):
            raise _NoSpelling("a value holds nan or inf")
        return _num_text(_float(x, v.dtype))

    return text(nested)


def _clean(name: str) -> str:
    """A script name as a gradflow variable name: letters, digits and _, starting with a letter."""
    name = re.sub(r"\W", "_", name.replace("[", "_").replace("]", "")).strip("_") or "v"
    name = name if re.match(r"[A-Za-z]", name) else "v" + name
    return name + "_" if name in _RESERVED else name


def _unique(name: str, used: set[str]) -> str:
    base, k = re.sub(r"\d+$", "", name) if name in used else name, 1
    while name in used:
        k += 1
        name = f"{base}{k}"
    used.add(name)
    return name


def _as_list(inputs) -> list:
    if isinstance(inputs, dict):
        return list(inputs.values())
    return [inputs] if type(inputs).__name__ == "Tensor" or hasattr(inputs, "grad_fn") else list(inputs)
