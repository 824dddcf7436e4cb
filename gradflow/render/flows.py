"""Flows -> text: `x.grad = 50 = -20 (via x*y1) + 70 (via x*y2)` under the eval table.

Scalar leaves get one line; tensor leaves one line per use, small tensors in
full and large ones as their shape and sum (the sums add up like the parts do).
"""
from __future__ import annotations

from rich.console import Console
from rich.text import Text

from gradflow.analysis.explanation import Explanation
from gradflow.analysis.flows import Contribution
from gradflow.values.text import SMALL, format_number, format_tensor


def compact(t) -> str:
    """A tensor in a few characters: a number, a short list, or its shape and sum."""
    if t is None:
        return "None"
    if t.dim() == 0 or t.numel() <= SMALL:
        return format_tensor(t)
    return f"[shape {tuple(t.shape)}, sum {format_number(t.detach().double().sum().item())}]"


def _why(part: Contribution, twice: bool = False) -> str:
    via = f"via {part.via}" + (f", arg {part.pos + 1}" if twice else "")
    if part.cut:
        return f"{via}, cut by {part.cut_by}" if part.cut_by else f"{via}, cut"
    return f"{via}, unused" if part.unused else via


def _twice(parts: list[Contribution]) -> list[bool]:
    """Uses whose consumer takes the leaf more than once (x*x): name the argument too."""
    ids = [p.to_id for p in parts]
    return [ids.count(i) > 1 for i in ids]


def _scalar_line(leaf: str, grad, parts: list[Contribution]) -> Text:
    line = Text.assemble((f"{leaf}.grad = ", "bold"), (compact(grad), "bold green"), " = ")
    for i, (part, twice) in enumerate(zip(parts, _twice(parts))):
        value = part.flow.item()
        if i:
            line.append(" - " if value < 0 else " + ")
            value = abs(value)
        line.append(format_number(value), style="dim" if part.cut else "")
        line.append(f" ({_why(part, twice)})", style="red" if part.cut else "dim")
    return line


def _tensor_lines(leaf: str, grad, parts: list[Contribution]) -> Text:
    lines = Text.assemble((f"{leaf}.grad = ", "bold"), (compact(grad), "bold green"))
    for i, (part, twice) in enumerate(zip(parts, _twice(parts))):
        lines.append(f"\n  {'=' if i == 0 else '+'} {compact(part.flow)}")
        lines.append(f"  ({_why(part, twice)})", style="red" if part.cut else "dim")
    return lines


def flow_lines(result: Explanation) -> Text:
    """One entry per chosen leaf: its grad and the parts it is the sum of."""
    out = Text()
    for leaf, parts in result.flows.items():
        grad = result.grads.get(leaf)
        if not parts:
            out.append(f"{leaf}.grad = {compact(grad)}  (no uses)\n")
            continue
        scalar = all(p.flow.dim() == 0 for p in parts)
        out.append(_scalar_line(leaf, grad, parts) if scalar else _tensor_lines(leaf, grad, parts))
        out.append("\n")
    out.rstrip()
    return out


def print_flows(result: Explanation, out: Console):
    out.print(Text("Flows (a leaf's grad is the sum of what comes back along each use):", style="bold"))
    out.print(flow_lines(result))
