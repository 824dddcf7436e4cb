"""`gradflow whatif`: each live node detached, each existing cut removed: the new grads."""
from __future__ import annotations

import typer

from gradflow.cli import options
from gradflow.cli.common import check_shadowed, emit, guarded, parse_values, print_warnings, program_and_values, request
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode

HELP_END = help_end([
    'gradflow whatif "(x*y1 - x*y2)^2" --x 1 --y1 2 --y2 7',
    'gradflow whatif "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7 --json',
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.INTERRUPTED],
    {ExitCode.OK: "done (a scenario that fails is a row, not an error)"})


def whatif_cmd(ctx: typer.Context, expr: options.ExprArg = None, file: options.FileOpt = None,
               wrt: options.WrtOpt = None, var: options.VarOpt = None, dtype: options.DtypeOpt = "float32",
               device: options.DeviceOpt = "cpu", json_: options.JsonOpt = False, debug: options.DebugOpt = False,
               strict: options.StrictOpt = False, summary: options.SummaryOpt = False, limit: options.LimitOpt = None):
    """What if I cut here? Each live node detached, each existing cut removed: the new grads.

    A value the program does not use is a warning (--strict: an error).
    """
    about = request(wrt, dtype, device)

    def body() -> int:
        source, rest = program_and_values(expr, file, ctx.args, limit)
        about["source"] = source
        check_shadowed(source, ctx, var, limit)  # parses: a syntax error exits before the heavier imports
        from gradflow.limits import as_limits, using
        from gradflow.studies.whatif import whatif

        with using(as_limits(limit)):  # every scenario, and the JSON, within the limits
            result = whatif(source, wrt=wrt, dtype=dtype, device=device, values=parse_values(rest, var, ctx),
                            strict=strict)
            from gradflow.render.whatif import whatif_table

            emit(result, json_, lambda: whatif_table(result), summary)
        print_warnings(result)
        return 0

    guarded(debug, json_, body, about)
