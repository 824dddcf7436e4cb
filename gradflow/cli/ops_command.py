"""`gradflow ops`: every operation of the language, from the op table."""
from __future__ import annotations

from gradflow.cli.common import JsonOpt, consoles
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode

HELP_END = help_end(["gradflow ops", "gradflow ops --json"],
                    [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.INTERRUPTED],
                    {ExitCode.INPUT: "bad input: an unknown option"})


def ops_cmd(json_: JsonOpt = False):
    """List every operation and function the language knows."""
    from gradflow.language.ops import OPS

    if json_:
        from gradflow.values.jsonable import dumps

        print(dumps([{"name": o.name, "symbol": o.symbol, "syntax": _syntax(o), "arity": o.arity, "kind": o.kind,
                      "doc": o.doc}
                     for o in OPS.values()]))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("name", "syntax", "args", "kind", "what it does")
    for o in OPS.values():
        table.add_row(o.name, Text(_syntax(o)), o.arity, o.kind, Text(o.doc))
    consoles()[0].print(table)


def _syntax(o) -> str:
    """How a program writes the op: a * b, -a, f(a), f(a, b)."""
    calls = [f"{o.name}({', '.join('ab'[:n])})" for n in range(o.min_args, o.max_args + 1)]
    if o.kind == "operator":
        return f"a {o.symbol} b" if o.min_args == 2 else f"{o.symbol}a"
    return " or ".join(([f"a {o.symbol} b"] if o.symbol else []) + calls)
