"""Parse tree -> typed nodes (syntax.py): the transformer, and how each spelling is resolved through the op
table (functions, methods, torch./F. names, attributes, indexing). Loaded only once a program has parsed:
a syntax error never pays for it. Torch-free."""
from __future__ import annotations

from lark import Token
from lark.visitors import Transformer_NonRecursive

from gradflow.errors import ParseError, Span
from gradflow.language.calls import Binder, number
from gradflow.language.ops import CONTEXTS, FUNCTIONS, METHODS, PROPERTIES, QUALIFIED, qualified, short, suggest
from gradflow.language.syntax import (
    Assign,
    Call,
    Expr,
    ExprStmt,
    Keyword,
    Namespace,
    Num,
    Seq,
    SetFlag,
    Str,
    Var,
    With,
)

NAMESPACES = ("torch", "F")  # torch.f(...), F.f(...) (import torch.nn.functional as F)
_NOT_VALUES = {  # a.NAME that is no value in gradflow: why, and what to write
    "grad": "the table shows every node's grad, and each chosen leaf's .grad under it",
    "requires_grad": "the table's requires_grad column shows it; set it with `x.requires_grad = false` "
                     "or x.requires_grad_(False)",
}


def _span_of(tok: Token) -> Span:
    return Span(tok.start_pos or 0, tok.end_pos or 0)


def _join(a: Span, b: Span) -> Span:
    return Span(a.start, b.end)


class _Slice:
    """a[start:stop:step] while it is being built."""

    def __init__(self, parts: list, span: Span):
        self.parts, self.full = parts, span


class _Ellipsis:
    def __init__(self, span: Span):
        self.full = span


class Build(Transformer_NonRecursive):
    """Bottom-up: every method returns a typed node with its span (no recursion: deep input is safe)."""

    def __init__(self, source: str):
        super().__init__()
        self.source = source

    def fail(self, kind: str, message: str, span: Span, hint: str | None = None) -> ParseError:
        return ParseError(kind, message, hint=hint, span=span, source=self.source)

    def number(self, c):
        s = _span_of(c[0])
        return Num(s, s, float(c[0]))

    def var(self, c):
        s = _span_of(c[0])
        return Var(s, s, str(c[0]))

    def paren(self, c):
        lpar, inner, rpar = c
        if isinstance(inner, Namespace):
            raise self._module(inner)
        inner.full = Span(lpar.start_pos, rpar.end_pos)
        return inner

    add = sub = mul = div = matmul = pow = lt = gt = le = ge = eq = ne = None  # set below from _binary()

    def neg(self, c):
        s = Span(c[0].start_pos, c[1].full.end)
        return Call(s, s, "neg", [c[1]], inner=c[1].full)

    # ---- arguments ----
    def args(self, c):
        return list(c)

    def items(self, c):
        return list(c)

    def kwarg(self, c):
        name, value = c
        return Keyword(str(name), value, Span(name.start_pos, value.full.end))

    def string(self, c):
        s = _span_of(c[0])
        return Str(s, s, str(c[0])[1:-1])

    def items_list(self, c):
        lsqb, items, rsqb = c
        s = Span(lsqb.start_pos, rsqb.end_pos)
        return Seq(s, s, items or [])

    def items_tuple(self, c):
        lpar, first, items, rpar = c
        s = Span(lpar.start_pos, rpar.end_pos)
        return Seq(s, s, [first, *(items or [])])

    # ---- calls: f(...), a.f(...), torch.f(...), a.T ----
    def call(self, c):
        name, lpar, args, rpar = c
        s = Span(name.start_pos, rpar.end_pos)
        op = FUNCTIONS.get(str(name))
        if op is None:
            raise self.fail("unknown_function", f"unknown function '{name}'", _span_of(name),
                            hint=self._function_hint(str(name)))
        return self._make(op, str(name), args, None, s)

    def _function_hint(self, name: str) -> str:
        torch_name = f"torch.{name}"
        if torch_name in QUALIFIED or name in METHODS:  # add(a, b): an operator, or a method only
            spelled = QUALIFIED.get(torch_name) or METHODS[name]
            return f"write {' or '.join(spelled.spellings()[:3])}; `gradflow ops` lists every spelling"
        near = suggest(name)
        return (f"did you mean '{near}'? " if near else "") + "`gradflow ops` lists every function"

    def method(self, c):
        recv, name, lpar, args, rpar = c
        s = Span(recv.full.start, rpar.end_pos)
        dotted = f"{getattr(recv, 'name', '')}.{name}"
        if self._is_namespace(recv) and (qualified(dotted) in QUALIFIED or isinstance(recv, Namespace)
                                         or str(name) not in METHODS):
            op = QUALIFIED.get(qualified(dotted))
            if op is None:
                raise self._unknown_qualified(dotted, Span(recv.full.start, name.end_pos))
            return self._make(op, dotted, args, None, s)
        op = METHODS.get(str(name))  # a.f(...); also F.sum() on a variable named F, which F. has no sum of
        if op is None:
            raise self._unknown_attribute(recv, name, called=True)
        inplace = op.kind == "flag" or str(name).endswith("_")
        call = self._make(op, f".{name}", args, recv, s, inplace=inplace)
        if op.name == "detach" and inplace:
            call.params = (("inplace", True),)  # torch refuses to detach a view in place
        return call

    def attr(self, c):
        recv, name = c
        s = Span(recv.full.start, name.end_pos)
        if self._is_namespace(recv):
            return Namespace(s, s, f"{recv.name}.{name}")
        op = PROPERTIES.get(str(name))
        if op is None:
            raise self._unknown_attribute(recv, name, called=False)
        return Call(s, s, op.name, [recv], inner=recv.full)

    @staticmethod
    def _is_namespace(e) -> bool:
        return isinstance(e, Namespace) or (isinstance(e, Var) and e.name in NAMESPACES)

    def _make(self, op, shown: str, args, receiver, span: Span, inplace: bool = False):
        operands, params = Binder(op, shown, span, self.source, receiver is not None).bind(args or [], receiver)
        inner = operands[0].full if operands else None
        return Call(span, span, op.name, operands, params, inner, inplace)

    def _unknown_qualified(self, dotted: str, span: Span) -> ParseError:
        if qualified(dotted) in CONTEXTS:
            return self.fail("unknown_function", f"{dotted}() is a context, not a function", span,
                             hint=f"write `with {dotted}():` over indented statements, or "
                                  f"{CONTEXTS[qualified(dotted)].name}(expr)")
        prefix = dotted.rsplit(".", 1)[0] + "."
        names = [short(q) if dotted.startswith("F.") else q for q in QUALIFIED]
        near = suggest(dotted, [n for n in names if n.startswith(prefix)] or names)
        return self.fail("unknown_function", f"unknown function '{dotted}'", span,
                         hint=(f"did you mean '{near}'? " if near else "") + "`gradflow ops` lists every spelling")

    def _unknown_attribute(self, recv, name: Token, called: bool) -> ParseError:
        span = _span_of(name)
        shown = f".{name}()" if called else f".{name}"
        if not called and str(name) in _NOT_VALUES:
            return self.fail("unknown_method", f"'{shown}' is not a value in gradflow", span,
                             hint=_NOT_VALUES[str(name)])
        if not called and str(name) in METHODS:
            return self.fail("unknown_method", f"'{shown}' is a method: call it, {shown}()", span,
                             hint=f"{METHODS[str(name)].name}: {METHODS[str(name)].doc}")
        near = suggest(str(name), [*METHODS, *PROPERTIES])
        near_shown = None if near is None else (f".{near}" if near in PROPERTIES else f".{near}()")
        return self.fail("unknown_method", f"unknown {'method' if called else 'attribute'} '{shown}'", span,
                         hint=(f"did you mean '{near_shown}'? " if near else "") + "`gradflow ops` lists every "
                              "spelling")

    def _module(self, ns) -> ParseError:
        if qualified(ns.name) in QUALIFIED:
            return self.fail("unknown_function", f"'{ns.name}' is a function: call it, {ns.name}(...)", ns.full,
                             hint=f"{QUALIFIED[qualified(ns.name)].name}: {QUALIFIED[qualified(ns.name)].doc}")
        return self.fail("unknown_function", f"'{ns.name}' is a module, not a value", ns.full,
                         hint="call a function of it, e.g. torch.sum(x)")

    # ---- a[...] ----
    def index(self, c):
        recv, lsqb, subs, rsqb = c
        s = Span(recv.full.start, rsqb.end_pos)
        spec: list = []
        for item in subs:
            if isinstance(item, _Ellipsis):
                if "..." in spec:
                    raise self.fail("argument", "an index can only have a single ellipsis ('...')", item.full)
                spec.append("...")
            elif isinstance(item, _Slice):
                spec.append(("slice", *(None if p is None else self._whole(p, "a slice bound") for p in item.parts)))
                step = spec[-1][3]
                if step is not None and step <= 0:
                    raise self.fail("argument", "slice step must be positive" + (" (torch has no negative steps)"
                                    if step < 0 else ""), item.parts[2].full,
                                    hint="a[::2] takes every other element")
            else:
                spec.append(self._whole(item, "an index"))
        return Call(s, s, "index", [recv], (("index", tuple(spec)),), recv.full)

    def subscripts(self, c):
        return list(c)

    def slicing(self, c):
        parts = [p for p in c if not isinstance(p, Token)]
        colons = [p for p in c if isinstance(p, Token)]
        parts += [None] * (3 - len(parts))
        ends = [p.full for p in parts if p is not None] + [_span_of(t) for t in colons]
        return _Slice(parts, Span(min(e.start for e in ends), max(e.end for e in ends)))

    def ellipsis(self, c):
        return _Ellipsis(_span_of(c[0]))

    def _whole(self, e, what: str) -> int:
        value = number(e)
        if value is None or not float(value).is_integer():
            got = self.source[e.full.start:e.full.end]
            raise self.fail("argument", f"{what} must be a whole number" + (" written in the program"
                            if value is None else "") + f", got {got}", e.full,
                            hint="a[0], a[-1], a[1:3], a[:, 0], a[..., -1]; tensors as indices are not supported")
        return int(value)

    # ---- statements ----
    def assign(self, c):
        name, expr = c
        if isinstance(expr, Namespace):
            raise self._module(expr)
        return Assign(str(name), expr, Span(name.start_pos, expr.full.end))

    def setflag(self, c):
        target, _, flag = c
        if not isinstance(target, Var):
            raise self.fail("syntax", "`.requires_grad = ...` sets a variable's flag: write a name before it",
                            target.full, hint="x.requires_grad = false, or (expr).requires_grad_(False)")
        return SetFlag(target.name, str(flag).lower() == "true", Span(target.full.start, flag.end_pos))

    def context(self, c):
        names = [str(t) for t in c if isinstance(t, Token) and t.type == "NAME"]
        rpar = c[-1]
        return ".".join(names), c[-2], Span(c[0].start_pos, rpar.end_pos)

    def with_stmt(self, c):
        with_tok, (dotted, args, span), _colon, *body = c
        op = CONTEXTS.get(qualified(dotted)) or FUNCTIONS.get(dotted)
        full = Span(with_tok.start_pos, span.end)
        if op is None or op.role != "region" or args:
            names = [*CONTEXTS, *(op.name for op in CONTEXTS.values())]
            near = suggest(dotted, names) if op is None else None
            raise self.fail("unknown_function", f"`with {self.source[span.start:span.end]}:` is not a block "
                            "gradflow knows", full,
                            hint=(f"did you mean '{near}()'? " if near else "") +
                                 "gradflow's blocks: `with torch.no_grad():` and `with torch.inference_mode():`")
        header = f"`with {dotted}():`" + (f" on line {self.source.count(chr(10), 0, full.start) + 1}"
                                          if "\n" in self.source.strip() else "")
        return With(op.name, header, self._statements(body), full)

    def _statements(self, items) -> list:
        out = []
        for st in items:
            if st is None:
                continue
            if isinstance(st, Namespace):
                raise self._module(st)
            out.append(ExprStmt(st, st.full) if isinstance(st, Expr) else st)
        return out

    def start(self, c):
        return self._statements(c)


def _binary(op: str):
    def build(self, c):
        for side in (c[0], c[-1]):
            if isinstance(side, Namespace):
                raise self._module(side)
        s = _join(c[0].full, c[-1].full)
        return Call(s, s, op, [c[0], c[-1]], inner=c[0].full)
    return build


for _op in ("add", "sub", "mul", "div", "matmul", "pow", "lt", "gt", "le", "ge", "eq", "ne"):
    setattr(Build, _op, _binary(_op))
