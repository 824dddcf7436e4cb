"""A seeded generator of gradflow programs together with their SymPy meaning.

Every occurrence of a leaf gets its own SymPy symbols (one per element), so the
derivative of L with respect to that occurrence is the gradient along that use:
the oracle for `Explanation.flows`. detach(...) and no_grad(...) become constants
(their value at the point). Programs have named statements reused later.
Each program can be written in three styles (the same tree, the same SymPy meaning):
"function" (sin(x), x^2, detach(e)), "method" ((x).sin(), x**2, (e).detach()) and
"torch" (torch.sin(x), torch.pow(x, 2), torch.detach(e), F.relu).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import sympy as sp

BIN = {"add": "+", "sub": "-", "mul": "*"}
FUNCS = {"sin": sp.sin, "tanh": sp.tanh, "exp": sp.exp}


@dataclass
class Case:
    source: str
    values: dict  # leaf -> float or list of floats
    L: sp.Expr = None
    uses: dict = field(default_factory=dict)  # leaf -> [((via, pos), [symbols])]
    point: dict = field(default_factory=dict)  # symbol -> value


class _Gen:
    def __init__(self, rng: random.Random, vector: bool):
        self.rng, self.vector = rng, vector
        self.names: list[str] = []

    def tree(self, depth: int):
        r = self.rng.random()
        if depth <= 0 or r < 0.2:
            pick = self.rng.random()
            if self.names and pick < 0.35:
                return ("name", self.rng.choice(self.names))
            if pick < 0.85:
                return ("var", self.rng.choice(["x", "x", "y"]))
            return ("const", self.rng.choice(["2", "0.5", "3"]))
        kinds = ["bin"] * 6 + ["neg", "fn", "fn", "sq", "detach", "no_grad"] + (["sum"] if self.vector else [])
        kind = self.rng.choice(kinds)
        if kind == "bin":
            return ("bin", self.rng.choice(list(BIN)), self.tree(depth - 1), self.tree(depth - 1))
        if kind in ("neg", "sq", "sum"):
            return (kind, self.tree(depth - 1))
        if kind == "fn":
            return ("fn", self.rng.choice(list(FUNCS)), self.tree(depth - 1))
        if kind == "no_grad":  # only around an operation computed inside (a real cut)
            return ("no_grad", ("bin", "mul", self.tree(depth - 2), self.tree(depth - 2)))
        return ("detach", self.tree(depth - 1))


STYLES = ("function", "method", "torch")


def _atomic(e) -> bool:
    return e[0] in ("var", "const", "name", "fn", "detach", "no_grad", "sum")


def _call(name: str, arg: str, style: str, receiver: str) -> str:
    """name(arg) in a style; `receiver`: arg as a method's receiver (parenthesised unless it is a name)."""
    if style == "method" and name != "no_grad":  # no_grad(e) has no method: gradflow's own spelling
        return f"{receiver}.{name}()"
    if style == "torch" and name != "no_grad":
        return f"torch.{name}({arg})"
    return f"{name}({arg})"


def text(e, style: str = "function") -> str:
    """The node's own text, exactly as gradflow records it (no enclosing parentheses)."""
    def wrap(c):
        return text(c, style) if _atomic(c) else f"({text(c, style)})"
    k = e[0]
    if k in ("var", "const", "name"):
        return e[1]
    if k == "bin":
        return f"{wrap(e[2])} {BIN[e[1]]} {wrap(e[3])}"
    if k == "neg":
        return f"-{wrap(e[1])}"
    if k == "sq":
        return f"{wrap(e[1])}^2" if style == "function" else f"{wrap(e[1])}**2" if style == "method" else \
            f"torch.pow({text(e[1], style)}, 2)"
    inner = e[2] if k == "fn" else e[1]
    chained = _atomic(inner) and inner[0] != "const"  # x.sin(), x.tanh().sum(), but (3).sin(), (x + y).sin()
    receiver = text(inner, style) if chained else f"({text(inner, style)})"
    return _call(e[1] if k == "fn" else k, text(inner, style), style, receiver)  # fn / detach / no_grad / sum


class _Sym:
    """Build the SymPy value (a list of elements; length 1 broadcasts) of each tree."""

    def __init__(self, case: Case, sizes: dict, env: dict, cuts: bool = True, style: str = "function"):
        self.case, self.sizes, self.env, self.count, self.cuts, self.style = case, sizes, env, 0, cuts, style

    def leaf(self, name: str, key) -> list:
        self.count += 1
        syms = [sp.Symbol(f"{name}_{self.count}_{j}") for j in range(self.sizes[name])]
        vals = self.case.values[name]
        for j, s in enumerate(syms):
            self.case.point[s] = vals[j] if isinstance(vals, list) else vals
        self.case.uses.setdefault(name, []).append((key, syms))
        return syms

    def const(self, vals: list) -> list:
        return [sp.Float(sp.N(v.subs(self.case.point), 20)) for v in vals]

    def build(self, e, key, label: str | None = None) -> list:
        k, me = e[0], label or text(e, self.style)
        if k == "var":
            return self.leaf(e[1], key)
        if k == "const":
            return [sp.Rational(e[1])]
        if k == "name":
            return self.env[e[1]]
        args = [self.build(a, (me, i)) for i, a in enumerate(e[1:] if k in ("neg", "sq", "sum", "detach", "no_grad")
                                                              else e[2:])]
        if k in ("detach", "no_grad"):
            return self.const(args[0]) if self.cuts else args[0]
        if k == "sum":
            return [sp.Add(*args[0])]
        if k == "bin":
            a, b = args
            n = max(len(a), len(b))
            a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
            op = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q}[e[1]]
            return [op(p, q) for p, q in zip(a, b)]
        f = {"neg": lambda v: -v, "sq": lambda v: v ** 2}.get(k) or FUNCS[e[1]]
        return [f(v) for v in args[0]]


def generate(seed: int, vector: bool = False, cuts: bool = True, style: str = "function") -> Case:
    """A random program; with cuts=False, L is its meaning with every detach/no_grad removed. `style`
    changes only how it is written (STYLES)."""
    rng = random.Random(seed)
    gen = _Gen(rng, vector)
    values = {"x": [round(rng.uniform(-1.5, 1.5), 3) for _ in range(3)] if vector else round(rng.uniform(-1.5, 1.5), 3),
              "y": round(rng.uniform(-1.5, 1.5), 3)}
    case = Case("", values)
    sym = _Sym(case, {"x": 3 if vector else 1, "y": 1}, {}, cuts, style)
    stmts = []
    for i in range(rng.randint(0, 2)):
        name = f"n{i + 1}"
        e = ("bin", rng.choice(list(BIN)), gen.tree(2), gen.tree(2))
        sym.env[name] = sym.build(e, None, label=name)
        stmts.append(f"{name} = {text(e, style)}")
        gen.names.append(name)
    top = ("bin", rng.choice(list(BIN)), gen.tree(3), gen.tree(3))
    if vector:
        top = ("sum", top)
    case.L = sym.build(top, None, label="L")[0]
    case.source = "; ".join(stmts + [f"L = {text(top, style)}"])
    used = {n for n in ("x", "y") if n in case.uses}
    case.values = {k: v for k, v in values.items() if k in used}
    return case
