"""Gradients against an independent oracle: SymPy, in float64.

A seeded generator builds random programs over every op, the same tree both as
gradflow text and as SymPy expressions. Every cut (detach / no_grad /
inference_mode of a computed value) becomes a fresh constant symbol holding its
forward value, exactly the semantics torch gives it. SymPy differentiates;
gradflow's grads (float64) must agree to rtol 1e-9, and so must the output.
Values stay in safe domains (log/sqrt of positive things, no kinks at ties).
Every program is also written as PyTorch code writes it (Style): with methods and
`**` (`(e).exp()`, `e**2`, `(e).detach()`, `a.requires_grad_(False)`), and with
qualified names (`torch.exp(e)`, `F.relu(e)`, `torch.pow(e, 2)`); the random draws are the
same, so it is the same program, and it must give the same values and gradients.
"""
import random

import pytest
import sympy as sp

from gradflow import explain

N = 3  # vector length
RTOL, ATOL = 1e-9, 1e-12


class Retry(Exception):
    """The draw landed on a kink or tie (abs/relu/min/max): draw again."""


STYLES = ("function", "method", "torch")
_TORCH = {"relu": "F.relu", "sigmoid": "torch.sigmoid", "tanh": "F.tanh", "sum": "torch.sum", "mean": "torch.mean",
          "min": "torch.min", "max": "torch.max", "min2": "torch.minimum", "max2": "torch.maximum"}


class Style:
    """How a program is written; never draws from the generator's random numbers."""

    def __init__(self, kind: str):
        self.kind = kind

    def call(self, name: str, *args: str) -> str:
        """name(a, ...) as a function, a method of its first argument, or a torch.* / F.* name."""
        if self.kind == "function" or name in ("no_grad", "inference_mode"):
            return f"{name[:3] if name in ('min2', 'max2') else name}({', '.join(args)})"
        if self.kind == "method":
            method = {"min2": "minimum", "max2": "maximum"}.get(name, name)
            return f"({args[0]}).{method}({', '.join(args[1:])})"
        return f"{_TORCH.get(name, 'torch.' + name)}({', '.join(args)})"

    def power(self, base: str, exponent: str, spell: str = "^") -> str:
        """base^exponent: as written by `spell` (^, ** or pow) in gradflow's style; `**` or pow otherwise."""
        if spell == "pow":
            return self.call("pow", base, exponent)
        return f"{base}{spell if self.kind == 'function' else '**'}{exponent}"

    def flag_off(self, name: str) -> str:
        return f"{name}.requires_grad_(False); " if self.kind == "method" else f"{name}.requires_grad = false; "


class Gen:
    def __init__(self, seed: int, vector: bool, style: str = "function"):
        self.rng = random.Random(seed)
        self.s = Style(style)
        self.env: dict = {}  # symbol -> value (inputs and cut constants)
        self.inputs: dict = {}  # name -> value (number or list)
        self.syms: dict = {}  # name -> list of symbols
        self.cuts = 0
        self.named: dict = {}  # name -> elements of an earlier `name = expr` statement
        self.aliases: set = set()  # texts like no_grad(x) that evaluate to x's very tensor
        for name in ("a", "b"):
            self.var(name, None)
        if vector:
            for name in ("v", "w"):
                self.var(name, N)

    def var(self, name, n):
        vals = [self.rng.choice([-1, 1]) * self.rng.uniform(0.3, 1.7) for _ in range(n or 1)]
        syms = [sp.Symbol(f"{name}{i}", real=True) for i in range(len(vals))]
        self.env.update(zip(syms, vals))
        self.inputs[name] = vals if n else vals[0]
        self.syms[name] = syms

    def num(self, e):
        """e at the drawn values, in 30-digit arithmetic (mpmath), as a float."""
        return float(e.xreplace({s: sp.Float(v, 30) for s, v in self.env.items()}).evalf(30))

    # every production returns (text, [sympy elements]); one element = scalar
    def leaf(self):
        if self.rng.random() < 0.15:
            c = self.rng.choice([2, 0.5, 3, 1.5, 1e-1])
            return repr(c), [sp.nsimplify(c)]
        name = self.rng.choice(list(self.syms) + list(self.named))
        return name, list(self.syms.get(name) or self.named[name])

    def expr(self, depth):
        if depth <= 0 or self.rng.random() < 0.2:
            return self.leaf()
        kind = self.rng.choice(["bin", "bin", "un", "fn", "fn", "red", "pow", "cut", "mm"])
        return getattr(self, "p_" + kind)(depth - 1)

    def p_bin(self, d):
        (t1, e1), (t2, e2) = self.expr(d), self.expr(d)
        op = self.rng.choice("+-*/")
        if op == "/":  # keep the divisor away from 0
            return f"({t1})/({self.s.power(f'({t2})', '2')} + 1)", _zip(e1, e2, lambda x, y: x / (y ** 2 + 1))
        f = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
        return f"({t1}) {op} ({t2})", _zip(e1, e2, f)

    def p_un(self, d):
        t, e = self.expr(d)
        return f"-({t})" if self.s.kind == "function" else self.s.call("neg", t), [-x for x in e]

    def p_fn(self, d):
        t, e = self.expr(d)
        name = self.rng.choice(["exp", "log", "sqrt", "abs", "sin", "cos", "tan", "tanh", "sigmoid", "relu"])
        if name in ("log", "sqrt"):
            return self.s.call(name, f"{self.s.power(f'({t})', '2')} + 0.5"), [
                (sp.log if name == "log" else sp.sqrt)(x ** 2 + sp.Rational(1, 2)) for x in e]
        if name in ("exp", "tan"):  # bounded argument: no overflow, no asymptote
            return self.s.call(name, self.s.call("tanh", t)), [(sp.exp if name == "exp" else sp.tan)(sp.tanh(x))
                                                                for x in e]
        if name in ("abs", "relu"):
            self.away(e, 0)
        f = {"abs": sp.Abs, "sin": sp.sin, "cos": sp.cos, "tanh": sp.tanh,
             "sigmoid": lambda x: 1 / (1 + sp.exp(-x)), "relu": lambda x: sp.Max(x, 0)}[name]
        return self.s.call(name, t), [f(x) for x in e]

    def away(self, elems, other):
        for x in elems:
            o = other if not isinstance(other, list) else other.pop(0)
            if abs(self.num(x - o)) < 1e-3:
                raise Retry

    def p_red(self, d):
        t, e = self.expr(d)
        name = self.rng.choice(["sum", "mean", "min", "max", "min2", "max2"])
        if name in ("min2", "max2"):
            t2, e2 = self.expr(d)
            pairs = _zip(e, e2, lambda x, y: (x, y))
            for x, y in pairs:
                self.away([x], y)
            f = sp.Min if name == "min2" else sp.Max
            return self.s.call(name, t, t2), [f(x, y) for x, y in pairs]
        if name in ("min", "max"):
            for i, x in enumerate(e):
                self.away([x] * (len(e) - i - 1), list(e[i + 1:]))
            return self.s.call(name, t), [(sp.Min if name == "min" else sp.Max)(*e)]
        total = sum(e)
        return self.s.call(name, t), [total if name == "sum" else total / len(e)]

    def p_pow(self, d):
        (t1, e1), (t2, e2) = self.expr(d), self.expr(d)
        spell = self.rng.choice(["^", "**", "pow"])
        if self.rng.random() < 0.5:  # small constant exponent, any base
            k = self.rng.choice([2, 3, -1])
            text = self.s.power(t1 if spell == "pow" else f"({t1})", str(k), spell)
            if k == -1:
                self.away(e1, 0)
            return text, [x ** k for x in e1]
        base = f"({self.s.power(f'({t1})', '2')} + 0.5)"
        text = self.s.power(base, self.s.call("tanh", t2), spell)
        return text, _zip(e1, e2, lambda x, y: (x ** 2 + sp.Rational(1, 2)) ** sp.tanh(y))

    def p_cut(self, d):
        name = self.rng.choice(["detach", "no_grad", "inference_mode"])
        t, e = self.expr(d)
        if name != "detach" and (t in self.syms or t in self.named or t in self.aliases):
            self.aliases.add(f"{name}({t})")  # no_grad(x) is x itself: no operation inside, no cut
            return f"{name}({t})", e
        consts = []
        for x in e:
            self.cuts += 1
            s = sp.Symbol(f"cut{self.cuts}", real=True)
            self.env[s] = self.num(x)
            consts.append(s)
        if name == "inference_mode":  # only add/sub may take an inference tensor along (no save)
            t0, e0 = self.expr(d)
            return f"({t0}) + inference_mode({t})", _zip(e0, consts, lambda x, y: x + y)
        return self.s.call(name, t), consts

    def p_mm(self, d):
        (t1, e1), (t2, e2) = self.expr(d), self.expr(d)
        if len(e1) == 1 or len(e2) == 1:
            return self.p_bin(d)
        text = f"({t1}) @ ({t2})" if self.s.kind == "function" else self.s.call("matmul", t1, t2)
        return text, [sum(x * y for x, y in zip(e1, e2))]


def _zip(e1, e2, f):
    if len(e1) == 1:
        e1 = e1 * len(e2)
    if len(e2) == 1:
        e2 = e2 * len(e1)
    return [f(x, y) for x, y in zip(e1, e2)]


def program(seed: int, vector: bool, style: str = "function"):
    for attempt in range(200):
        g = Gen(seed * 1000 + attempt, vector, style)
        try:
            stmts = named(g)
            text, elems = g.expr(4)
        except Retry:
            continue
        if len(elems) > 1:
            text, elems = g.s.call("sum", text), [sum(elems)]
        text = "\n".join(stmts + [text])
        used = [n for n in g.inputs if _uses(text, n)]
        g.off = [n for n in used if g.rng.random() < 0.15]  # `n.requires_grad = false`: grad None
        if used:
            return g, "".join(g.s.flag_off(n) for n in g.off) + text, elems[0], used
    raise AssertionError("no program drawn")


def named(g: Gen) -> list[str]:
    """Sometimes an earlier statement `u = expr` that the output may use (or not) by name."""
    if g.rng.random() < 0.5:
        return []
    text, elems = g.expr(2)
    g.named["u"] = elems
    return [f"u = {text}"]


def _uses(text, name):
    import re
    return re.search(rf"\b{name}\b", text) is not None


def check(seed, vector, style="function"):
    g, text, L, used = program(seed, vector, style)
    r = explain(text, wrt="all", dtype="float64", values={n: g.inputs[n] for n in used})
    assert r.output.value.item() == pytest.approx(g.num(L), rel=RTOL, abs=ATOL), text
    for name in g.off:
        assert r.grad(name) is None and "set to false" in r.why[name]
    for name in (n for n in used if n not in g.off):
        want = [g.num(sp.diff(L, s)) for s in g.syms[name]]
        got = r.grad(name)
        if got is None:  # no path: the oracle must say 0 too
            got = [0.0] * len(want)
        got = got if isinstance(got, list) else [got]
        assert got == pytest.approx(want, rel=RTOL, abs=ATOL), (text, name, r.why.get(name))
    if r.error is not None:  # nothing could flow back: every derivative is 0
        assert r.error.kind == "no_gradient"
    return text


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("seed", range(30))
def test_scalar_programs(seed, style):
    check(seed, vector=False, style=style)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("seed", range(30))
def test_vector_programs(seed, style):
    check(seed, vector=True, style=style)


def test_styles_write_the_same_program():
    """The styles only respell: the same draws, the same oracle, and every style's own spellings appear."""
    texts = {style: [program(s, v, style)[1] for s in range(30) for v in (False, True)] for style in STYLES}
    assert [program(s, True, "method")[2] for s in range(5)] == [program(s, True)[2] for s in range(5)]
    method, torch_names = " ".join(texts["method"]), " ".join(texts["torch"])
    for word in [").exp()", ").sum()", ").detach()", ").pow(", ").maximum(", "**", ".requires_grad_(False)",
                 ").matmul(", ").neg()"]:
        assert word in method, word
    for word in ["torch.exp(", "F.relu(", "torch.sum(", "torch.detach(", "torch.pow(", "torch.maximum(", "F.tanh(",
                 "torch.matmul(", "torch.neg("]:
        assert word in torch_names, word
    assert "^" not in method + torch_names


def test_generator_covers_every_op():
    """The drawn programs exercise the whole language, cuts included."""
    texts = " ".join(program(s, v)[1] for s in range(30) for v in (False, True))
    for word in ["u = ", "requires_grad = false", "exp(", "log(", "sqrt(", "abs(", "sin(", "cos(", "tan(", "tanh(", "sigmoid(", "relu(", "sum(",
                 "mean(", "min(", "max(", "pow(", "detach(", "no_grad(", "inference_mode(", "^", "**", "@", "/"]:
        assert word in texts, word
