"""How one recorded torch call is written in gradflow's language: operators with the grammar's precedence,
functions, numbers, values and variable names. Torch-free: it reads names and templates, never tensors' code.

`spell` returns None for a call with no exact spelling; the writer (program_writer.py) then says which op and
where. Operators, the one-tensor functions and the cuts have their own tables below; any other call whose torch
name is a spelling of a row of the op table (language/ops.py) is written through that row: its arguments bound
to the row's parameters (torch's names), each checked against the parameter's kind, and refused when torch was
given something the row does not take (a weight, a label_smoothing, a tuple of dims).
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from gradflow.language.ops import FUNCTIONS, METHODS, QUALIFIED, Op, Param, short

COMPARE, SUM, PRODUCT, UNARY, POWER, ATOM = 0, 1, 2, 3, 4, 5  # the grammar's precedence levels
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
_SYMBOLS = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
_COMPARE = {**_SYMBOLS, **{f"__{n}__": sym for n, sym in _SYMBOLS.items()},
            "greater": ">", "less": "<", "greater_equal": ">=", "less_equal": "<=", "not_equal": "!="}
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


Arg = Callable[[int | str], Expr]  # writes the recorded argument at a position (int) or keyword (str)


def spell(name: str, args: tuple, kw: dict, same_meta: bool, arg: Arg,
          is_tensor: Callable[[int | str], bool]) -> Expr | None:
    """The call `name(*args, **kw)` with its operands written by `arg(i)`; None when it has no exact spelling."""
    if name in _IDENTITY_IF_SAME and same_meta and args:  # x.to(torch.float32) of a float32 x
        return arg(0)
    plain = all(_changes_nothing(key, value) for key, value in kw.items())  # alpha=1, inplace=..., Nones
    expr = _own_spelling(name, args, arg, is_tensor) if plain else None
    return expr if expr is not None else row_call(name, args, kw, arg, is_tensor)


def _own_spelling(name: str, args: tuple, arg: Arg, is_tensor: Callable[[int | str], bool]) -> Expr | None:
    """Operators, comparisons, the one-tensor functions, the cuts and identities, min/max."""
    if name == "__getitem__" and len(args) == 2:
        index = _index_text(args[1])
        return None if index is None else Expr(f"{arg(0).at(ATOM)}[{index}]", ATOM)
    if name in _COMPARE and len(args) == 2:
        return Expr(f"{arg(0).at(SUM)} {_COMPARE[name]} {arg(1).at(SUM)}", COMPARE)
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


# torch's keywords that the rows do not take, at the values that change nothing (F.cross_entropy passes them all)
_NEUTRAL = {"alpha": 1, "ignore_index": -100, "label_smoothing": 0.0}


def _changes_nothing(key: str, value) -> bool:
    return value is None or key in ("inplace", "memory_format", "_stacklevel") or (
        key in _NEUTRAL and value == _NEUTRAL[key] and not isinstance(value, bool))


# ---- any other op of the op table ---------------------------------------------------------------------------
_OWN = {"min", "max", "minimum", "maximum", "detach", "detach_", "index"}  # spelled above, or never by name
ROWS: dict[str, Op] = {name: op for name, op in (*((q.rsplit(".", 1)[1], op) for q, op in QUALIFIED.items()),
                                                 *METHODS.items(), *FUNCTIONS.items())
                       if op.kind != "flag" and op.role == "plain" and name not in _OWN}
_IN_PLACE = {name: op for name, op in ROWS.items() if op.kind == "function" and op.shape == "first"}  # x.clamp_(0)
_RENAMED = {"unbiased": lambda v: ("correction", int(v)) if isinstance(v, bool) else None}  # x.var(unbiased=False)


def row_call(name: str, args: tuple, kw: dict, arg: Arg, is_tensor: Callable[[int | str], bool]) -> Expr | None:
    """torch's `name(*args, **kw)` written as the op table's row of that name, or None where the row cannot say
    the same (an argument it has no parameter for, or of another kind)."""
    op = ROWS.get(name) or (_IN_PLACE.get(name[:-1]) if name.endswith("_") else None)
    if op is None:
        return None
    bound = _bind(op, args, kw)
    if bound is None:
        return None
    parts, gap = [], False
    for p in op.params:
        if p.name not in bound:
            gap = gap or not p.required
            if p.required:
                return None
            continue
        text = _param_text(p, bound[p.name], arg, is_tensor)
        if text is None:
            return None
        if text != "":  # "": the parameter's default, left out
            positional = p.kind in ("tensor", "tensors") and not gap
            parts.append(text if positional else f"{p.name}={text}")
    return _call_text(op, parts, arg, bound)


def _bind(op: Op, args: tuple, kw: dict) -> dict | None:
    """Parameter name -> the recorded argument (its position or keyword as an int or str for tensors)."""
    params = op.params
    if params[-1].kind == "shape" and len(args) > len(params) and all(type(a) is int for a in args[1:]):
        args = (args[0], tuple(args[1:]))  # x.reshape(2, 3)
    if len(args) > len(params):
        return None
    bound: dict = {p.name: (i, a) for i, (p, a) in enumerate(zip(params, args))}
    for key, value in kw.items():
        if key in _RENAMED and (renamed := _RENAMED[key](value)) is not None:
            key, value = renamed
        p = next((p for p in params if p.name == key), None)
        if p is None:
            if _changes_nothing(key, value):
                continue
            return None
        if p.name in bound:
            return None
        bound[p.name] = (key, value)
    return bound


def _param_text(p: Param, at: tuple, arg: Arg, is_tensor: Callable[[int | str], bool]) -> str | None:
    """One argument as the program writes it; "" for the parameter's default; None where it cannot be written."""
    where, value = at
    if p.kind == "tensor":
        if value is None and p.default is None:
            return ""
        return arg(where).text if is_tensor(where) or _is_number(value) else None
    if value == p.default and type(value) is type(p.default):
        return ""
    if p.kind == "bool":
        return str(value) if isinstance(value, bool) else None
    if p.kind == "number":
        return number(value).text if _is_number(value) else None
    if p.kind == "str":
        return repr(value) if value in p.choices else None
    if p.kind == "dims" and type(value) is tuple and value:  # x.sum(dim=(0, 1))
        return _ints(value)
    if p.kind in ("int", "dims"):
        return str(value) if type(value) is int else "None" if value is None else None
    if p.kind == "shape":  # x.view(-1), x.reshape((2, 3))
        return _ints((value,) if type(value) is int else value)
    return None


def _ints(value) -> str | None:
    """A tuple of ints as the language writes it: (0, 1), (6,)."""
    if type(value) is not tuple or not all(type(d) is int for d in value):
        return None
    return "(" + ", ".join(map(str, value)) + ("," if len(value) == 1 else "") + ")"


def plain_index(a) -> bool:
    """An index the language writes (a[1:3], a[:, 0], a[..., -1]; a[0] is an int), a tuple of dims or a shape:
    ints, slices of ints and `...`, alone or in a tuple."""
    if not (type(a) in (tuple, slice) or a is Ellipsis):
        return False
    items = a if type(a) is tuple else (a,)
    return bool(items) and all(type(i) is int or i is Ellipsis or type(i) is slice and all(
        type(v) is int or v is None for v in (i.start, i.stop, i.step)) for i in items)


def _index_text(a) -> str | None:
    if not plain_index(a) and type(a) is not int:
        return None
    items = a if type(a) is tuple else (a,)
    return ", ".join("..." if i is Ellipsis else str(i) if type(i) is int else
                     ":".join("" if v is None else str(v) for v in ((i.start, i.stop) if i.step is None
                                                                     else (i.start, i.stop, i.step)))
                     for i in items)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _call_text(op: Op, parts: list[str], arg: Arg, bound: dict) -> Expr:
    """`name(a, b, key=value)` by the row's own function name, else as a method of its first operand."""
    if op.functions:
        return Expr(f"{op.functions[0]}({', '.join(parts)})", ATOM)
    if op.torch:
        return Expr(f"{short(op.torch[0])}({', '.join(parts)})", ATOM)
    first = arg(bound[op.params[0].name][0])
    return Expr(f"{first.at(ATOM)}.{op.methods[0]}({', '.join(parts[1:])})", ATOM)


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
