"""`gradflow ops`: every operation of the language, from the op table."""
from __future__ import annotations

from gradflow.cli import options
from gradflow.cli.common import consoles
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode

HELP_END = help_end(["gradflow ops", "gradflow ops --json"],
                    [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.INTERRUPTED],
                    {ExitCode.INPUT: "bad input: an unknown option"})


def ops_cmd(json_: options.JsonOpt = False):
    """List every operation of the language with every way to write it."""
    from gradflow.language.ops import F_PREFIX, OPS

    if json_:
        from gradflow.values.jsonable import dumps

        print(dumps([{"name": o.name, "symbol": o.symbol, "syntax": " or ".join(o.spellings()),
                      "spellings": o.spellings(), "params": o.signature(), "arity": o.arity, "kind": o.kind,
                      "doc": o.doc} for o in OPS.values()]))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=True, caption="F. stands for torch.nn.functional. (import torch.nn.functional as F): "
                  "F.relu(a) is also torch.nn.functional.relu(a). `gradflow ops --json` lists both.",
                  caption_justify="left")
    table.add_column("op: its spellings", no_wrap=True)
    table.add_column("what it does")
    for o in OPS.values():
        plain = all(p.kind == "tensor" and p.required for p in o.params)  # nothing to say beyond the spellings
        doc = o.doc if plain else f"{o.doc}\nparameters: {o.signature()}" + (
            f"\nalso (numpy's words): {o.aliases()}" if o.aliases() else "")
        shown = [s for s in o.spellings() if not s.startswith(F_PREFIX)]
        table.add_row(Text.assemble((o.name, "bold"), (f"  {o.kind}", "dim"), *(f"\n  {s}" for s in shown)), Text(doc))
    consoles()[0].print(table)
