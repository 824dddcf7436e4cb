"""The options the commands share, declared once (Typer's Annotated form): a command's signature names them
`options.NAME`.

Imports no torch and no rich: `--help` stays fast.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gradflow.limits import (
    JSON_FULL_MAX,
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_JSON_ELEMENTS,
    MAX_LENGTH,
    MAX_LINE,
    MAX_NODES,
    MAX_TOTAL_ELEMENTS,
)
from gradflow.studies.eval_extras import EVAL_GRAPH_FORMATS

EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}  # a command's --NAME VALUE values

# Each option that takes a value names it with a metavar (Typer's default is a type, like <list[str]>).
# Options with fixed values list them in the metavar; the commands still check them (their own messages).
DTYPES = ("float32", "float64", "float16", "bfloat16")  # as gradflow.values.tensors.DTYPES (which imports torch)
DEVICES = ("cpu", "cuda", "mps")  # as gradflow.values.tensors.resolve_device


def choices(values) -> str:
    """The metavar of an option with fixed values: [a|b|c]."""
    return "[" + "|".join(str(v) for v in values) + "]"


def _limit_help() -> str:
    """Built from gradflow.limits, so the defaults it quotes cannot go stale."""
    return (f"Change a resource limit: length ({MAX_LENGTH:,} characters), depth ({MAX_DEPTH:,} levels), "
            f"nodes ({MAX_NODES:,}), elements ({MAX_ELEMENTS:,} per tensor), total ({MAX_TOTAL_ELEMENTS:,} "
            f"elements over all values), line ({MAX_LINE:,} bytes of a batch input line), json ({MAX_JSON_ELEMENTS:,} "
            "tensor elements printed in full in one JSON document). Repeatable.")


ExprArg = Annotated[str | None, typer.Argument(
    help="The program, e.g. \"(x*y1 - detach(x*y2))^2\"; '-' reads it from stdin.", show_default=False,
    metavar="EXPR")]
FileOpt = Annotated[Path | None, typer.Option("--file", metavar="PATH", help="Read the program from this file.")]
WrtOpt = Annotated[str | None, typer.Option(
    "--wrt", metavar="NAMES", help="Leaves that require grad: 'a,b' or 'all'. Default: x if used, else every "
                                   "variable.")]
VarOpt = Annotated[list[str] | None, typer.Option(
    "--var", metavar="NAME=VALUE", help="A variable's value; needed when its name is an option's (--var json=1). "
                                        "Repeatable.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", metavar=choices(DTYPES), help="Floating-point type of the values.")]
DeviceOpt = Annotated[str, typer.Option("--device", metavar=choices(DEVICES), help="Where torch computes.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one strict JSON document instead of the table.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks (for bug reports).")]
SeedOpt = Annotated[int, typer.Option("--seed", metavar="INTEGER",
                                      help="Seed for randn()/rand() values: same seed, same values.")]
SummaryOpt = Annotated[bool, typer.Option("--summary", help=f"With --json: tensors over {JSON_FULL_MAX:,} elements as "
                                          "{shape, dtype, mean, min, max, norm} objects, not in full.")]
BriefOpt = Annotated[bool, typer.Option("--brief", help="Only the answer: the output, each leaf's grad (and why "
                                        "it is None) and the warnings, with no nodes or edges. Faster.")]
FullOpt = Annotated[bool, typer.Option("--full", help="With --json: every tensor in full (the default; kept for old "
                                       "scripts).")]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Sweeps: draw L and dL/dx in the terminal; "
                                       "--plot FILE.png|svg|pdf writes a picture (needs gradflow[plot]).")]
CheckOpt = Annotated[bool, typer.Option("--check", help="Also compare autograd with finite differences (float64).")]
OrderOpt = Annotated[int, typer.Option("--order", metavar=choices((1, 2)),
                                       help="2: also show second derivatives (the Hessian).")]
GraphOpt = Annotated[str | None, typer.Option("--graph", metavar=choices(EVAL_GRAPH_FORMATS),
                                                 help="Also draw the autograd graph.")]
LimitOpt = Annotated[list[str] | None, typer.Option("--limit", metavar="NAME=N", help=_limit_help())]
HtmlOpt = Annotated[Path | None, typer.Option("--html", metavar="FILE.html",
                    help="Also write one self-contained HTML page: the graph (click a node for its details), the "
                         "table and the cuts.")]
FlowsOpt = Annotated[bool, typer.Option("--flows", help="Under the table, split each leaf's grad by use.")]
OutOpt = Annotated[Path | None, typer.Option("--output", "-o", metavar="PATH",
                                                help="Write to this file instead of stdout.")]
StrictOpt = Annotated[bool, typer.Option("--strict", help="A value the program does not use is an error (exit 2), "
                                         "not a warning.")]
