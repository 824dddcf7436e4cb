"""One backward() of a script -> a rich table with its leaves' grads, or a JSON record (`gradflow script`).

Never prints: the command decides where each part goes. JSON never goes through rich.
"""
from __future__ import annotations

from rich import box
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradflow.analysis.explanation import SCHEMA_VERSION
from gradflow.display import fit_name
from gradflow.script.program_writer import NoProgram, Program
from gradflow.script.recorder import BackwardCall, Named
from gradflow.values.jsonable import one_document, to_jsonable
from gradflow.values.text import DASH, format_tensor

STATUS = {  # marker, style, legend
    "live": ("●", "green", "gradient reached it"),
    "cut": ("✂", "red", "cut (why: below)"),
    "none": ("◌", "yellow", "requires grad, got none"),
    "off": ("○", "dim", "requires_grad=False"),
}
GRAD_NOTE = "grad: a leaf's .grad; for the others, the gradient that reached them (their .grad stays None)"


def shown_grad(n: Named):
    """What the grad column shows: .grad for a leaf (what the script reads), else the hook's gradient."""
    return n.tensor.grad if n.tensor.is_leaf else n.grad


def _grad_fn(n: Named) -> str:
    return type(n.tensor.grad_fn).__name__ if n.tensor.grad_fn is not None else DASH


def _label(n: Named, width: int = 10 ** 6) -> Text:
    """The status mark and the name, shortened at the front to fit `width` (never broken mid-word)."""
    mark, style, _ = STATUS[n.status]
    also = f" (also {', '.join(n.aliases)})" if n.aliases else ""
    text = Text.assemble((mark + " ", style), fit_name(n.name, max(8, width - 2 - len(also))))
    if also:
        text.append(also, style="dim")
    return text


def title(call: BackwardCall) -> Text:
    where = f" at {call.line}" if call.line else ""
    return Text.assemble((f"backward {call.index}", "bold"), f"{where}: {call.code}")


_HEADERS = ("tensor", "value", "requires_grad", "is_leaf", "grad_fn", "grad")


Cells = list[tuple[str, ...]]  # per named tensor: value, requires_grad, is_leaf, grad_fn, grad


def _cells(call: BackwardCall) -> Cells:
    """Per named tensor: value, requires_grad, is_leaf, grad_fn, grad as the table shows them."""
    return [(format_tensor(n.tensor.detach(), "\n"), str(n.tensor.requires_grad), str(n.tensor.is_leaf), _grad_fn(n),
             format_tensor(shown_grad(n), "\n")) for n in call.named]


def _others(cells: Cells) -> int:
    """The width of every column but the tensor column, with the gaps between columns."""
    need = 2 * (len(_HEADERS) - 1)
    for k, head in enumerate(_HEADERS[1:]):
        need += max(len(line) for c in [head, *(row[k] for row in cells)] for line in c.split("\n"))
    return need


def tensor_table(call: BackwardCall, cells: Cells, width: int | None = None) -> Table:
    """The table; in `width` columns, names lose their front rather than break (display.fit_name)."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True)
    table.add_column("tensor", no_wrap=True, min_width=8)
    for head in _HEADERS[1:]:
        table.add_column(head, no_wrap=True, justify="right" if head in ("value", "grad") else "left")
    names = 10 ** 6 if width is None else width - _others(cells)
    for n, row in zip(call.named, cells):
        table.add_row(_label(n, names), *(Text(c) for c in row))  # Text: a value like [nan, 1] is not markup
    return table


def tensor_blocks(call: BackwardCall, cells: Cells, width: int = 10 ** 6) -> Group:
    """The table's content as a block per tensor, for a console too narrow for the table."""
    parts: list = [Text()]
    for n, (value, rg, leaf, fn, grad) in zip(call.named, cells):
        parts.append(Text.assemble(_label(n, width), (f"  requires_grad {rg} · is_leaf {leaf} · grad_fn {fn}", "dim")))
        parts.append(Padding(Text(f"value {' · '.join(value.split(chr(10)))}\ngrad {' · '.join(grad.split(chr(10)))}"),
                             (0, 0, 0, 2)))
    parts.append(Text())
    return Group(*parts)


def legend(call: BackwardCall) -> Text:
    seen = {n.status for n in call.named}
    return Text("  ".join(f"{STATUS[s][0]} {STATUS[s][2]}" for s in STATUS if s in seen), style="dim")


def footer(call: BackwardCall) -> Text:
    """The cuts, each leaf's .grad (saying when it accumulated over earlier calls), torch's error if any."""
    out = Text()
    for n in call.named:
        if n.reason is not None and n.status != "live":  # cut, frozen, or got nothing: why, with the lines
            mark, style, _ = STATUS[n.status]
            out.append(f"{mark} ", style=style)
            out.append(f"{n.name}: {n.reason}\n")
    for n in call.named:
        if n.tensor.is_leaf and n.tensor.requires_grad:
            out.append(f"{n.name}.grad = ", style="bold")
            grad = n.tensor.grad
            out.append("None" if grad is None else format_tensor(grad), style="bold green" if grad is not None
                       else "yellow")
            if n.accumulated and n.grad is not None:
                before = format_tensor(n.grad_before) if n.grad_before is not None else "what was"
                out.append(f"  (= {before} already there + {format_tensor(n.grad)} from this backward)",
                           style="yellow")
            out.append("\n")
    if call.error:
        out.append(f"backward raised: {call.error}\n", style="red")
    out.rstrip()
    return out


def backward_view(call: BackwardCall, width: int) -> Group:
    """The title, the table of named tensors (blocks when narrower than `width`), the legend, the cuts and the
    leaves' grads."""
    if call.named:
        cells = _cells(call)
        fits = _others(cells) + 8 <= width  # the tensor column at 8 columns, every other column whole
        view = tensor_table(call, cells, width) if fits else tensor_blocks(call, cells, width)
        parts = [title(call), view, legend(call), Text(GRAD_NOTE, style="dim")]
    else:
        parts = [title(call), Text("(no tensor has a name in the script yet)", style="dim")]
    parts += [Text(), footer(call)]
    return Group(*parts)


def program_line(call: BackwardCall, options: set[str]) -> str:
    """`same in gradflow: gradflow eval ...`, or why there is no such program."""
    p = call.program
    if isinstance(p, Program):
        return f"as a gradflow program: {p.command(options)}"
    return f"no gradflow program for this backward: {p.reason}"


@one_document
def record(call: BackwardCall, options: set[str]) -> dict:
    """One JSON Lines record: the call, every named tensor, the leaves' grads, the eval program."""
    p = call.program
    tensors = [{"name": n.name, "aliases": n.aliases, "shape": list(n.tensor.shape),
                "value": to_jsonable(n.tensor.detach()), "requires_grad": n.tensor.requires_grad,
                "is_leaf": n.tensor.is_leaf, "grad_fn": None if n.tensor.grad_fn is None else _grad_fn(n),
                "grad": to_jsonable(shown_grad(n)), "status": n.status,
                "cut": n.cut.to_dict() if n.cut is not None else None, "cuts": [c.to_dict() for c in n.cuts],
                "reason": n.reason} for n in call.named]
    leaves = [n for n in call.named if n.tensor.is_leaf and n.tensor.requires_grad]
    return {
        "schema": SCHEMA_VERSION, "call": call.index, "line": call.line, "code": call.code,
        "outputs": call.root_names, "retain_graph": call.retain_graph, "tensors": tensors,
        "grads": {n.name: to_jsonable(n.tensor.grad) for n in leaves},
        "added": {n.name: to_jsonable(n.grad) for n in leaves},
        "eval": {"argv": p.argv(options), "command": p.command(options), "why_not": None}
        if isinstance(p, Program) else {"argv": None, "command": None,
                                        "why_not": p.reason if isinstance(p, NoProgram) else None},
        "error": None if call.error is None else {"kind": "backward_failed", "message": call.error,
                                                  "why": call.no_grad[0] if call.no_grad else None,
                                                  "fix": call.no_grad[1] if call.no_grad else None},
    }
