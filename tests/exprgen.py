"""A seeded generator of gradflow programs together with their SymPy meaning.

Every occurrence of a leaf gets its own SymPy symbols (one per element), so the
derivative of L with respect to that occurrence is the gradient along that use:
the oracle for `Explanation.flows`. detach(...) and no_grad(...) become constants
(their value at the point). Programs have named statements reused later.
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


def _atomic(e) -> bool:
    return e[0] in ("var", "const", "name", "fn", "detach", "no_grad", "sum")


def text(e) -> str:
    """The node's own text, exactly as gradflow records it (no enclosing parentheses)."""
    def wrap(c):
        return text(c) if _atomic(c) else f"({text(c)})"
    k = e[0]
    if k in ("var", "const", "name"):
        return e[1]
    if k == "bin":
        return f"{wrap(e[2])} {BIN[e[1]]} {wrap(e[3])}"
    if k == "neg":
        return f"-{wrap(e[1])}"
    if k == "sq":
        return f"{wrap(e[1])}^2"
    if k == "fn":
        return f"{e[1]}({text(e[2])})"
    return f"{k}({text(e[1])})"  # detach / no_grad / sum


class _Sym:
    """Build the SymPy value (a list of elements; length 1 broadcasts) of each tree."""

    def __init__(self, case: Case, sizes: dict, env: dict, cuts: bool = True):
        self.case, self.sizes, self.env, self.count, self.cuts = case, sizes, env, 0, cuts

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
        k, me = e[0], label or text(e)
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


def generate(seed: int, vector: bool = False, cuts: bool = True) -> Case:
    """A random program; with cuts=False, L is its meaning with every detach/no_grad removed."""
    rng = random.Random(seed)
    gen = _Gen(rng, vector)
    values = {"x": [round(rng.uniform(-1.5, 1.5), 3) for _ in range(3)] if vector else round(rng.uniform(-1.5, 1.5), 3),
              "y": round(rng.uniform(-1.5, 1.5), 3)}
    case = Case("", values)
    sym = _Sym(case, {"x": 3 if vector else 1, "y": 1}, {}, cuts)
    stmts = []
    for i in range(rng.randint(0, 2)):
        name = f"n{i + 1}"
        e = ("bin", rng.choice(list(BIN)), gen.tree(2), gen.tree(2))
        sym.env[name] = sym.build(e, None, label=name)
        stmts.append(f"{name} = {text(e)}")
        gen.names.append(name)
    top = ("bin", rng.choice(list(BIN)), gen.tree(3), gen.tree(3))
    if vector:
        top = ("sum", top)
    case.L = sym.build(top, None, label="L")[0]
    case.source = "; ".join(stmts + [f"L = {text(top)}"])
    used = {n for n in ("x", "y") if n in case.uses}
    case.values = {k: v for k, v in values.items() if k in used}
    return case
