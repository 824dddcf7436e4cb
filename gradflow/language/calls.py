"""A call's arguments bound to its op row's parameters, as Python binds them: positions, then keywords; each
value checked against the parameter's kind (operands, whole numbers for dims and shapes, True/False,
numbers, one of a few strings). Errors are ParseErrors with torch's wording and the span of the bad part.
Torch-free."""
from __future__ import annotations

from gradflow.errors import ParseError, Span
from gradflow.language.ops import Op, Param, suggest
from gradflow.language.syntax import Call, Expr, Keyword, Namespace, Num, Seq, Str, Var

BOOLS = {"True": True, "true": True, "False": False, "false": False}
WORDS = {*BOOLS, "None"}  # names that are values of parameters, never variables


def number(e) -> float | None:
    """A number written in the program (2, -1.5), else None."""
    if isinstance(e, Num):
        return e.value
    if isinstance(e, Call) and e.op == "neg" and isinstance(e.args[0], Num):
        return -e.args[0].value
    return None


def takes(lo: int, hi: int) -> str:
    if lo == hi:
        return f"{lo} argument" + ("" if lo == 1 else "s")
    return f"{lo} {'or' if hi == lo + 1 else 'to'} {hi} arguments"


class Binder:
    """Binds one call: `shown` is how messages name it (`sum`, `torch.sum`, `.sum`)."""

    def __init__(self, op: Op, shown: str, span: Span, source: str, method: bool):
        self.op, self.shown, self.span, self.source, self.method = op, shown, span, source, method

    def fail(self, kind: str, message: str, hint: str | None = None, span: Span | None = None) -> ParseError:
        return ParseError(kind, message, hint=hint, span=span or self.span, source=self.source)

    def bind(self, args: list, receiver: Expr | None) -> tuple[list[Expr], tuple]:
        """-> (operands in parameter order, ((name, value), ...) for the other parameters, defaults included)."""
        positional, keywords = self.split(args)
        params = self.op.params
        if receiver is not None:
            positional.insert(0, receiver)
        if self.method and params[-1].kind == "shape" and len(positional) > len(params):  # a.reshape(2, 3)
            rest = positional[len(params) - 1:]
            positional[len(params) - 1:] = [Seq(Span(rest[0].full.start, rest[-1].full.end),
                                                Span(rest[0].full.start, rest[-1].full.end), list(rest))]
        if len(positional) > len(params) or (not keywords and len(positional) < self.op.needed_operands):
            skip, given = receiver is not None, len(positional) + len(keywords)
            raise self.fail("arity", f"{self.shown}() takes {takes(self.op.min_args - skip, len(params) - skip)}, "
                            f"got {given - skip}", hint=f"{self.shown}: {self.op.doc}")
        bound = dict(zip(self.op.param_names, positional))
        for kw in keywords:
            p = self.param(kw)
            if p.name in bound:
                raise self.fail("arity", f"{self.shown}() got multiple values for argument '{p.name}'", span=kw.span)
            bound[p.name] = kw.value
        missing = [name for name in self.op.required_names if name not in bound]
        if missing:
            raise self.fail("arity", f"{self.shown}() missing required argument '{missing[0]}'",
                            hint=f"{self.shown}({self.op.signature()})" + (", e.g. dim=-1 for the last dim"
                                                                           if missing[0] == "dim" else ""))
        operands: list[Expr] = []
        others = []
        for p in params:
            value = self.convert(p, bound[p.name]) if p.name in bound else p.default
            if p.kind == "tensor" and value is not None:
                operands.append(value)
            elif p.kind == "tensors":
                operands.extend(value)
            elif p.kind not in ("tensor", "tensors"):
                others.append((p.name, value))
        self.torch_overloads(operands)
        return operands, tuple(others)

    def split(self, args: list) -> tuple[list, list[Keyword]]:
        positional, keywords, seen = [], [], set()
        for a in args:
            if isinstance(a, Keyword):
                if a.name in seen:
                    raise self.fail("syntax", f"keyword argument repeated: {a.name}", span=a.span)
                seen.add(a.name)
                keywords.append(a)
            elif keywords:
                raise self.fail("syntax", "positional argument follows keyword argument", span=a.full,
                                hint=f"{self.shown}({self.op.signature()})")
            else:
                positional.append(a)
        return positional, keywords

    def param(self, kw: Keyword) -> Param:
        names = [p.name for p in self.op.params[1 if self.method else 0:]]
        for p in self.op.params:
            if (p.name == kw.name or kw.name in p.aliases) and p.name in names:
                return p
        if self.op.name in ("min", "max") and kw.name == "dim":
            raise self.fail("unknown_keyword", f"{self.shown}(dim=...) returns (values, indices) in torch, which "
                            "gradflow does not support", span=Span(kw.span.start, kw.span.start + len(kw.name)),
                            hint=f"{self.shown}() takes the whole tensor, or a second tensor for the elementwise "
                                 f"{self.op.name}imum")
        near = "dim" if kw.name in ("axis", "dims") and "dim" in names else suggest(kw.name, names)
        listing = ", ".join(names) if names else "no keywords"
        raise self.fail("unknown_keyword", f"{self.shown}() got an unexpected keyword argument '{kw.name}'",
                        hint=(f"did you mean '{near}'? " if near else "") + f"{self.shown}() takes: {listing}",
                        span=Span(kw.span.start, kw.span.start + len(kw.name)))

    def convert(self, p: Param, e):
        kind = p.kind
        word = e.name if isinstance(e, Var) and e.name in WORDS else None
        if word == "None" and p.default is None:  # only where torch takes None
            return None
        if kind == "tensor":
            if word or not isinstance(e, Expr) or isinstance(e, (Str, Seq, Namespace)):
                raise self.wrong(p, e, "a tensor (an expression)")
            return e
        if kind == "tensors":
            if not isinstance(e, Seq) or not e.items:
                raise self.wrong(p, e, "a list of tensors, e.g. [a, b]")
            return [self.convert(Param(p.name), item) for item in e.items]
        if kind == "bool":
            if word not in BOOLS:
                raise self.wrong(p, e, "True or False")
            return BOOLS[word]
        if kind == "number":
            value = number(e)
            if value is None:
                raise self.wrong(p, e, "a number written in the program")
            return value
        if kind == "str":
            if not isinstance(e, Str) or e.value not in p.choices:
                raise self.wrong(p, e, " or ".join(repr(c) for c in p.choices))
            return e.value
        if kind == "int" or (kind == "dims" and not isinstance(e, Seq)):
            return self.whole(p, e)
        if isinstance(e, Seq):  # dims or shape
            return tuple(self.whole(p, item) for item in e.items)
        return (self.whole(p, e),)  # a shape of one dimension

    def whole(self, p: Param, e) -> int:
        value = number(e)
        if value is None or not float(value).is_integer():
            raise self.wrong(p, e, "a whole number" + (" written in the program" if value is None else ""))
        return int(value)

    def wrong(self, p: Param, e, want: str) -> ParseError:
        text = self.source[e.full.start:e.full.end] if hasattr(e, "full") else str(e)
        return self.fail("argument", f"{self.shown}(): {p.name} must be {want}, got {text}",
                         hint=f"{self.shown}({self.op.signature()})", span=getattr(e, "full", None))

    def torch_overloads(self, operands: list[Expr]) -> None:
        """torch.max(a, 1) and a.max(1) reduce along dim 1 and return (values, indices) in torch: refused rather
        than read as the elementwise maximum with 1 (which the bare max(a, 1) means)."""
        if self.op.name in ("min", "max") and self.shown != self.op.name and len(operands) == 2:
            n = number(operands[1])
            if n is not None:
                raise self.fail("argument", f"{self.shown}(a, {n:g}) reduces along dim {n:g} in torch and returns "
                                "(values, indices), which gradflow does not support",
                                hint=f"for the elementwise {self.op.name}imum with a number use torch.clamp(a, "
                                     f"{'max' if self.op.name == 'min' else 'min'}={n:g})")
