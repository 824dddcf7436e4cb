"""Where is the program not smooth at this point? (abs/relu at 0, max/min ties, sqrt/log at 0, ...)

Looks only at node ops and the values the engine measured; used by the numeric
check (finite differences disagree with autograd at such points) and second derivatives.
"""
from __future__ import annotations

from dataclasses import dataclass

from gradflow.analysis.explanation import Explanation
from gradflow.analysis.status import depends_on
from gradflow.language.graph import Graph
from gradflow.values.text import format_tensor


@dataclass
class Note:
    node: str  # the expression text
    message: str

    def to_dict(self) -> dict:
        return {"node": self.node, "message": self.message}


def _zero(t, tol: float) -> bool:
    return bool((t.abs() <= tol).any())


def _corner(op, args, tol):
    a = args[0]
    if op in ("abs", "relu") and _zero(a, tol):
        return "a corner at 0 (torch uses gradient 0 there; finite differences average both sides)"
    if op in ("sqrt", "log") and _zero(a, tol):
        return "an infinite derivative at 0"
    if op == "div" and _zero(args[1], tol):
        return "division by 0"
    if op == "pow" and _zero(a, tol) and bool((args[1] < 1).any()):
        return "0 raised to a power below 1 (infinite or undefined derivative)"
    return None


def _tie(op, args, value, tol):
    if op not in ("max", "min"):
        return None
    if len(args) == 2:
        return "tied arguments (a = b), where the derivative jumps" if _zero(args[0] - args[1], tol) else None
    ties = int(((args[0] - value).abs() <= tol).sum())
    if ties > 1:
        return f"{ties} elements tied for the {op}imum (torch shares the gradient among them)"
    return None


def notes(result: Explanation, graph: Graph, tol: float = 0.0) -> list[Note]:
    """Nodes depending on a chosen leaf whose op is not smooth at the argument values
    (|value| <= tol counts as 0)."""
    deps = depends_on(graph, result.wrt)
    out = []
    for n in graph.nodes:
        if not deps[n.id] or not n.args:
            continue
        args = [result.nodes[a].value.double() for a in n.args]
        why = _corner(n.op, args, tol) or _tie(n.op, args, result.nodes[n.id].value.double(), tol)
        if why:
            shown = ", ".join(f"{result.nodes[a].name} = {format_tensor(v)}" for a, v in zip(n.args, args))
            out.append(Note(n.text, f"{n.text} is not differentiable here: {why}; {shown}"))
    return out
