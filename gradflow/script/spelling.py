"""How one recorded torch call is written in gradflow's language: operators with the grammar's precedence,
functions, numbers, values and variable names. Torch-free: it reads names and templates, never tensors' code.

`spell` returns None for a call with no exact spelling; the writer (program.py) then says which op and where.
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from gradflow.language.ops import FUNCTIONS

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


class NoSpelling(Exception):
    """This loss cannot be written as a gradflow program; the message says why."""


@dataclass
class Expr:
    """Program text and the precedence level of its outermost operator."""

    text: str
    level: int

    def at(self, level: int) -> str:
        """The text as an operand that needs at least `level`: in parentheses when it binds less tightly."""
        return self.text if self.level >= level else f"({self.text})"


def spell(name: str, args: tuple, kw: dict, same_meta: bool, arg: Callable[[int], Expr],
          is_tensor: Callable[[int], bool]) -> Expr | None:
    """The call `name(*args, **kw)` with its operands written by `arg(i)`; None when it has no exact spelling."""
    if name in _IDENTITY_IF_SAME and same_meta and args:  # x.to(torch.float32) of a float32 x
        return arg(0)
    if not _plain_kwargs(name, kw):
        return None
    if name in _BINARY and len(args) == 2:
        sym, swapped = _BINARY[name]
        return binary(sym, arg(1), arg(0)) if swapped else binary(sym, arg(0), arg(1))
    if len(args) == 1 and name in _IDENTITY:
        return arg(0)
    if name in _MINMAX and len(args) == 2:
        return Expr(f"{_MINMAX[name]}({arg(0).text}, {arg(1).text})", ATOM) if is_tensor(1) else None
    if len(args) != 1:
        return None
    if name in _NEG:
        inner = arg(0)
        return Expr("-" + (inner.text if inner.level >= UNARY and not inner.text.startswith("-")
                           else f"({inner.text})"), UNARY)
    if name == "square":
        return binary("^", arg(0), Expr("2", ATOM))
    fn = _UNARY.get(name) or ("detach" if name in _DETACH else None) or (name if name in _REDUCE else None) \
        or _MINMAX.get(name)
    return None if fn is None else Expr(f"{fn}({arg(0).text})", ATOM)


def _plain_kwargs(name: str, kw: dict) -> bool:
    """Keyword arguments that change nothing: alpha=1, inplace=..., out-of-the-way Nones."""
    for key, value in kw.items():
        if value is None or key == "inplace" or key == "alpha" and value == 1 or key == "memory_format":
            continue
        return False
    return True


def binary(sym: str, a: Expr, b: Expr) -> Expr:
    level = _LEVEL[sym]
    if sym == "^":
        return Expr(f"{a.at(ATOM)}^{b.at(UNARY)}", POWER)
    text = f"{a.at(level)} {sym} {b.at(level + 1)}" if level == SUM or sym == "@" else \
        f"{a.at(level)}{sym}{b.at(level + 1)}"
    return Expr(text, level)


def number(x: int | float) -> Expr:
    text = str(x) if isinstance(x, int) else _num_text(x)
    return Expr(text, SUM if text.startswith("-") else ATOM)  # x*(-3), not x*-3


def _num_text(x: float) -> str:
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def float_text(x: float, dtype) -> float:
    """The shortest decimal that reads back as the same float32 (float64: Python's own repr)."""
    if str(dtype) != "torch.float32":
        return x
    for digits in range(6, 10):
        short = float(f"{x:.{digits}g}")
        if struct.unpack("f", struct.pack("f", short))[0] == x:
            return short
    return x


def value_text(v) -> str:
    """A value as gradflow reads it: a number, or a JSON list ([[1,2],[3,4]])."""
    nested = v.detach().double().tolist()

    def text(x) -> str:
        if isinstance(x, list):
            return "[" + ",".join(text(y) for y in x) + "]"
        if not math.isfinite(x):
            raise NoSpelling("a value holds nan or inf")
        return _num_text(float_text(x, v.dtype))

    return text(nested)


def clean_name(name: str) -> str:
    """A script name as a gradflow variable name: letters, digits and _, starting with a letter."""
    name = re.sub(r"\W", "_", name.replace("[", "_").replace("]", "")).strip("_") or "v"
    name = name if re.match(r"[A-Za-z]", name) else "v" + name
    return name + "_" if name in _RESERVED else name


def unique(name: str, used: set[str]) -> str:
    base, k = re.sub(r"\d+$", "", name) if name in used else name, 1
    while name in used:
        k += 1
        name = f"{base}{k}"
    used.add(name)
    return name
