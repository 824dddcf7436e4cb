"""A seeded generator of programs with aliases, in-place methods and regions, each written twice: as a gradflow
program and as plain torch code (Python run by exec, never through gradflow), so the two can be compared.

The shapes the expression generator (exprgen.py) never makes: a name bound to another name (`b = a`, `b = (a)`),
`detach_()` through any of a tensor's names, `requires_grad_()` on leaves, `no_grad(...)`/`inference_mode(...)`
around a name (torch hands the object itself back) or around an operation, `with` blocks of either region
holding assignments, and constants computed inside a region.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

REGIONS = ("no_grad", "inference_mode")


@dataclass
class AliasCase:
    source: str  # the gradflow program
    torch_code: str  # the same program in plain torch; leaves x and y come from the caller
    values: dict[str, float]


class _Gen:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.names = ["x", "y"]
        self.gf: list[str] = []
        self.pt: list[str] = []
        self.fresh = 0

    def new_name(self) -> str:
        self.fresh += 1
        return f"n{self.fresh}"

    def operand(self) -> tuple[str, str]:
        """(gradflow text, torch text) of a simple operand: a name or a constant."""
        if self.rng.random() < 0.15:
            c = self.rng.choice(["2.0", "0.5", "3.0"])
            return c, f"torch.tensor({c})"
        name = self.rng.choice(self.names)
        return name, name

    def expr(self) -> tuple[str, str]:
        (a, ta), (b, tb) = self.operand(), self.operand()
        kind = self.rng.choice(["mul", "add", "sin", "clone", "detach", "alias", "paren", "const_only"])
        if kind == "mul":
            return f"{a}*{b}", f"{ta}*{tb}"
        if kind == "add":
            return f"{a} + {b}", f"{ta} + {tb}"
        if kind == "sin":
            return f"sin({a})", f"torch.sin({ta})"
        if kind == "clone":
            return f"{a}.clone()", f"({ta}).clone()"
        if kind == "detach":
            return f"detach({a})", f"({ta}).detach()"
        if kind == "paren":
            return f"({a})", f"({ta})"
        if kind == "const_only":
            return "2.0 - 1.0", "torch.tensor(2.0) - torch.tensor(1.0)"
        return a, ta

    def statement(self, indent: str = "") -> None:
        r = self.rng.random()
        name = self.rng.choice(self.names)
        if r < 0.15 and name not in ("x", "y"):
            self.gf.append(f"{indent}{name}.detach_()")
            self.pt.append(f"{indent}{name}.detach_()")
            return
        if r < 0.2:
            leaf = self.rng.choice(["x", "y"])
            self.gf.append(f"{indent}{leaf}.detach_()")
            self.pt.append(f"{indent}{leaf}.detach_()")
            return
        target = self.new_name()
        g, t = self.expr()
        if r < 0.45:  # a region around the expression, written as a function call
            region = self.rng.choice(REGIONS)
            self.gf.append(f"{indent}{target} = {region}({g})")
            self.pt.append(f"{indent}with torch.{region}():")
            self.pt.append(f"{indent}    {target} = {t}")
        else:
            self.gf.append(f"{indent}{target} = {g}")
            self.pt.append(f"{indent}{target} = {t}")
        self.names.append(target)

    def block(self) -> None:
        region = self.rng.choice(REGIONS)
        self.gf.append(f"with torch.{region}():")
        self.pt.append(f"with torch.{region}():")
        for _ in range(self.rng.randint(1, 2)):
            self.statement("    ")

    def program(self) -> AliasCase:
        for _ in range(self.rng.randint(2, 6)):
            if self.rng.random() < 0.2:
                self.block()
            else:
                self.statement()
        last = self.rng.sample(self.names, k=min(len(self.names), self.rng.randint(1, 3)))
        self.gf.append(" + ".join(f"{n}*x" for n in last))
        self.pt.append("L = " + " + ".join(f"{n}*x" for n in last))
        values = {"x": self.rng.choice([0.5, 1.5, 2.0, -1.0]), "y": self.rng.choice([0.5, 3.0, -2.0])}
        return AliasCase("\n".join(self.gf), "\n".join(self.pt), values)


def alias_case(seed: int) -> AliasCase:
    return _Gen(random.Random(seed)).program()


def run_torch(case: AliasCase) -> dict[str, float | None] | str:
    """x.grad and y.grad from the plain torch code, or "error" where torch refuses the program or its backward."""
    x = torch.tensor(case.values["x"], requires_grad=True)
    y = torch.tensor(case.values["y"], requires_grad=True)
    env = {"torch": torch, "x": x, "y": y}
    try:
        exec(case.torch_code, env)  # noqa: S102  # our own generated torch code
        env["L"].backward()
    except RuntimeError:
        return "error"
    return {"x": _item(x.grad), "y": _item(y.grad)}


def _item(grad) -> float | None:
    return None if grad is None else float(grad)
