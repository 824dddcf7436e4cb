"""`gradflow eval`: evaluate a program, run backward, show every node (sweeps: sweep_output.py)."""
from __future__ import annotations

import typer

from gradflow.cli import options
from gradflow.cli.common import (
    check_shadowed,
    consoles,
    guarded,
    parse_values,
    program_and_values,
    report_error,
    request,
    summary_mode,
)
from gradflow.cli.help import help_end
from gradflow.cli.startup import pause_collector, resume_collector
from gradflow.errors import ExitCode, ValueInputError

HELP_END = help_end([
    'gradflow eval "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7',
    'gradflow eval "sum(w*x)" --w "[1,2]" --x "[3,4]" --wrt all --json',
    'gradflow eval "x^3 - 3*x" --x=-2:2:41 --plot',
    'gradflow eval "x^3*y" --x 2 --y 1 --check --order 2 --flows',
    'gradflow eval "sum(x^2)" --x "randn(3,4)" --seed 1 --graph mermaid',
    'gradflow eval "x^2" --x 3 --dtype float64 --limit depth=1000',
    'gradflow eval "x^2*y" --x 3 --y 2 --brief --json    # the answer only: no nodes, no edges',
    'echo "x^2" | gradflow eval - --x 3',
    'gradflow eval "2*detach(x)" --x 1    # exit 3: detach cuts x off',
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.NO_GRADIENT, ExitCode.INTERRUPTED],
    {ExitCode.OK: "done (a leaf may still get grad None: the reason is printed)"})


def eval_cmd(ctx: typer.Context, expr: options.ExprArg = None, file: options.FileOpt = None, wrt: options.WrtOpt = None,
             var: options.VarOpt = None, dtype: options.DtypeOpt = "float32", device: options.DeviceOpt = "cpu",
             json_: options.JsonOpt = False, debug: options.DebugOpt = False, check: options.CheckOpt = False,
             order: options.OrderOpt = 1, graph: options.GraphOpt = None, limit: options.LimitOpt = None,
             seed: options.SeedOpt = 0, full: options.FullOpt = False, plot: options.PlotOpt = False,
             flows: options.FlowsOpt = False, strict: options.StrictOpt = False, summary: options.SummaryOpt = False,
             brief: options.BriefOpt = False, html: options.HtmlOpt = None):
    """Evaluate a program, run backward and show every node's value and gradient.

    Give each variable's value as --NAME VALUE: a number or a JSON list (--x 1, --x=-2, --w "[1,2]").

    Sweep one variable with --x START:STOP:COUNT (e.g. --x=-2:2:41); tensor values: --x "randn(3,4)", --x @x.npy.

    A value the program does not use is a warning (--strict: an error).

    --brief: only L and each leaf's grad (with --json: no nodes, edges or contributions), computed faster.
    """
    about = request(wrt, dtype, device, limit)
    about["brief"] = brief

    def body() -> int:
        pause_collector()  # one evaluation: see cli/startup.py
        try:
            return work()
        finally:
            resume_collector()

    def work() -> int:
        source, rest = program_and_values(expr, file, ctx.args, limit, moved=plot)  # --plot FILE.png lands in EXPR
        about["source"] = source
        check_brief(brief, flows=flows, check=check, order=order != 1, graph=graph is not None, html=html is not None)
        check_shadowed(source, ctx, var, limit)  # parses: a syntax error exits before the imports below
        from gradflow.cli.sweep_output import SweepRequest, find_sweep, run, split_plot_file
        from gradflow.engine.explain import explain
        from gradflow.limits import as_limits, using

        args, plot_file = split_plot_file(rest, plot)
        values = parse_values(args, var, ctx)
        swept = find_sweep(values, plot, json_ and plot_file is None, check or order != 1 or graph is not None)
        summary_ = summary_mode(full, summary)
        if swept and html is not None:
            raise ValueInputError("usage", "--html draws one evaluation, not a sweep",
                                  hint="give the swept variable one value")
        if swept:
            resume_collector()  # many evaluations
            with using(as_limits(limit)):  # every point, and every JSON record, within the limits
                return run(SweepRequest(source, values, wrt, dtype, device, seed, json_, summary_, plot, plot_file,
                                        strict, brief), *swept)
        result = explain(source, wrt=wrt, dtype=dtype, device=device, seed=seed, values=values, limits=limit,
                         strict=strict, brief=brief)
        if html is not None:
            from gradflow.cli.common import write_html
            from gradflow.render.html_report import explanation_section

            write_html(html, f"gradflow eval {source}", [explanation_section(result, source)])
        from gradflow.studies.eval_extras import Extras

        with using(as_limits(limit)):  # --check/--order 2/--graph re-run the program within the same limits
            extra = Extras.compute(result, check=check, order=order, graph=graph)
            return show(result, extra, json_, summary_, flows)

    guarded(debug, json_, body, about)


def check_brief(brief: bool, **views: bool) -> None:
    """--brief leaves out the nodes and edges that --flows, --check, --order 2 and --graph read (exit 2)."""
    asked = [name for name, on in views.items() if on]
    if brief and asked:
        option = "--order 2" if asked[0] == "order" else f"--{asked[0]}"
        raise ValueInputError("usage", f"--brief leaves out the nodes and edges that {option} needs",
                              hint=f"drop --brief to get {option}, or drop {option} for the brief answer")


def show(result, extra, as_json: bool, summary: bool, flows: bool) -> int:
    """Print an evaluation (JSON, or the table with --flows and the extras) and return the exit code."""
    from gradflow.render.node_table import print_explanation, print_warnings

    out, err = consoles()
    if as_json:
        from gradflow.values.jsonable import document, dumps

        with document(summary):  # one document: the extras' tensors count against the same limit
            text = dumps(_with_extras(result.to_dict(), extra))
        print(text, flush=True)
        print_warnings(result, err)  # stdout stays pure JSON; warnings are also in it
    elif result.brief:
        from gradflow.render.node_table import print_brief

        print_brief(result, out, err)
    else:
        print_explanation(result, out, err)
        if flows:
            from gradflow.render.flows import print_flows

            print_flows(result, out)
        _print_extras(extra, out)
    return 0 if result.error is None else report_error(result.error)  # exit 3: the table / JSON is out


def _with_extras(doc: dict, extras) -> dict:
    """--check, --order 2 and --graph add the fields "check", "hessian" and "graph"; the others never change."""
    if extras.check is not None:
        doc["check"] = extras.check.to_dict()
    if extras.hessian is not None:
        doc["hessian"] = extras.hessian.to_dict()
    if extras.graph is not None:
        from gradflow.render.graph_text import to_dot, to_mermaid

        render = {"dot": to_dot, "mermaid": to_mermaid}.get(extras.graph_format or "")
        doc["graph"] = {**extras.graph.to_dict(), "format": extras.graph_format,
                        "text": None if render is None else render(extras.graph)}
    return doc


def _print_extras(extras, out) -> None:
    """--check, --order 2 and --graph under the table."""
    from gradflow.render.checks import check_table, hessian_view, note_lines
    from gradflow.render.graph_text import print_picture

    if extras.check is not None:
        out.print(check_table(extras.check))
        if extras.check.notes:
            out.print(note_lines(extras.check.notes))
    if extras.hessian is not None:
        out.print(hessian_view(extras.hessian))
    if extras.graph is not None:
        print_picture(extras.graph, extras.graph_format or "tree", out)
