"""`gradflow graph`: the autograd graph as a tree, DOT, Mermaid, SVG or PNG."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated

import typer

from gradflow.cli import options
from gradflow.cli.common import (
    check_shadowed,
    consoles,
    guarded,
    parse_values,
    print_warnings,
    read_program,
    refuse_binary_on_terminal,
)
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode, ValueInputError
from gradflow.render.graphviz import graphviz

FORMATS = ("tree", "dot", "mermaid", "svg", "png")
FormatOpt = Annotated[str, typer.Option("--format", metavar=options.choices(FORMATS),
                                        help="The picture's format (svg and png need Graphviz).")]
HELP_END = help_end([
    'gradflow graph "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7',
    'gradflow graph "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7 --format dot',
    'gradflow graph "sum(w*x)" --w "[1,2]" --x "[3,4]" --format mermaid -o g.mmd',
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.INTERRUPTED],
    {ExitCode.OK: "done (also when no gradient flows: the graph shows why)"})


def _tree_text(pic, output: Path | None):
    from gradflow.render.console import MAX_WIDTH, new_console
    from gradflow.render.graph_text import to_tree

    if output is None:
        consoles()[0].print(to_tree(pic))
        return None
    console = new_console(record=True, width=MAX_WIDTH, color_system=None, file=io.StringIO())
    console.print(to_tree(pic))
    return console.export_text()


def render(pic, fmt: str, output: Path | None) -> str | bytes | None:
    """The picture in `fmt`; None when it was printed already (tree to the terminal)."""
    from gradflow.render.graph_text import to_dot, to_mermaid

    if fmt == "tree":
        return _tree_text(pic, output)
    if fmt == "mermaid":
        return to_mermaid(pic)
    text = to_dot(pic)
    return text if fmt == "dot" else graphviz(text, fmt)


def write_out(data: str | bytes, output: Path | None):
    """To the file -o names (whole or not at all: cli/files.py), else to stdout."""
    if output is not None:
        from gradflow.cli.files import write_file

        write_file(output, data)
    else:  # text in UTF-8 whatever the terminal's encoding: a file for tools (click.echo writes it so)
        typer.echo(data, nl=False)


def graph_cmd(ctx: typer.Context, expr: options.ExprArg = None, file: options.FileOpt = None,
              wrt: options.WrtOpt = None, var: options.VarOpt = None, dtype: options.DtypeOpt = "float32",
              device: options.DeviceOpt = "cpu", format_: FormatOpt = "tree", output: options.OutOpt = None,
              debug: options.DebugOpt = False, strict: options.StrictOpt = False):
    """Draw the autograd graph torch records: names from the expression, flows on the edges, cuts marked.

    A value the program does not use is a warning (--strict: an error).
    """
    def body() -> int:
        from gradflow.engine.explain import explain
        from gradflow.studies.torch_graph import picture

        source = read_program(expr, file)
        check_shadowed(source, ctx, var)  # a variable named format or output: --var format=2, not --format 2
        if format_ not in FORMATS:
            raise ValueInputError("usage", f"unknown --format '{format_}'", hint="use " + ", ".join(FORMATS))
        refuse_binary_on_terminal(format_, output, "--format")
        values = parse_values(ctx.args, var, ctx)
        result = explain(source, wrt=wrt, dtype=dtype, device=device, values=values, strict=strict)
        data = render(picture(result), format_, output)
        if data is not None:
            write_out(data, output)
        print_warnings(result)
        return 0

    guarded(debug, False, body)
