"""`gradflow inspect FILE.py:FUNCTION`: trace the user's own code, report every parameter.

The user's file is imported (running it is the point) and FUNCTION is called with
no arguments inside `gradflow.trace()`; it returns a loss, or (loss, model), or
(loss, {name: tensor}). Their code runs contained (cli/user_code.py): what it writes
goes to stderr, so stdout holds only the report; what it raises is reported as its
failure (exit 5). torch is imported only when the command runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from gradflow.cli import options
from gradflow.cli.common import consoles, guarded, refuse_binary_on_terminal, report_error, write_html
from gradflow.cli.function_args import check_call, parse_args, unpack
from gradflow.cli.help import help_end
from gradflow.cli.streams import exit_hard, stdout_gone
from gradflow.cli.user_code import contained, preload
from gradflow.errors import ExitCode, GradflowError, ValueInputError
from gradflow.report.fail_on import CLASSES as GATE_CLASSES
from gradflow.report.fail_on import gate_document, parse_classes

GRAPHS = ("tree", "dot", "mermaid", "svg", "png")
TargetArg = Annotated[str, typer.Argument(help="FUNCTION takes no arguments (or those given with --arg) and "
                                               "returns a loss, (loss, model), (loss, model, optimizer) or "
                                               "(loss, {name: tensor}).",
                                          show_default=False, metavar="FILE.py:FUNCTION")]
OnlyProblemsOpt = Annotated[bool, typer.Option("--only-problems", help="Show only parameters that got no "
                                                                       "(or an exactly zero) gradient.")]
ExpandOpt = Annotated[bool, typer.Option("--expand", help="One row per parameter (no folding by module).")]
DepthOpt = Annotated[int | None, typer.Option("--depth", min=1, metavar="INTEGER", show_default=False,
                                              help="Fold parameters by module path up to this depth (default 2); "
                                                   "with --autograd, draw each module at this depth as one "
                                                   "node (default: every op).")]
AutogradOpt = Annotated[bool, typer.Option("--autograd", help="With --graph or --html: draw the autograd graph "
                                                              "torch recorded, one node per op, named by your "
                                                              "lines and modules, repeated blocks folded "
                                                              "(h.0-h.11 x12), instead of the modules.")]
LibraryLinesOpt = Annotated[bool, typer.Option("--library-lines", help="Reasons also name where in library "
                                                                       "code (transformers, ...) each cut op ran.")]
GraphOpt = Annotated[str | None, typer.Option(
    "--graph", metavar=options.choices(GRAPHS), help="A picture instead of the table (svg and png need Graphviz).")]
FailOnOpt = Annotated[list[str] | None, typer.Option(
    "--fail-on", metavar="CLASSES", help="Exit 6 if a parameter is in one of these classes (comma-separated): "
                                         + ", ".join(GATE_CLASSES) + "; or default, all.")]
AllowOpt = Annotated[list[str] | None, typer.Option(
    "--allow", metavar="PATTERN", help="With --fail-on: parameters whose name matches this glob never fail "
                                       "(e.g. 'aux_head.*'). Repeatable.")]
ArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", metavar="NAME=VALUE", help="An argument for FUNCTION; VALUE is a Python literal, else a string. "
                                        "Repeatable.")]
HealthOpt = Annotated[bool, typer.Option("--health", help="Gradient health per layer instead of the table: "
                                                          "grad norms in forward order (log scale), vanishing and "
                                                          "exploding layers flagged; with --json, a \"health\" key.")]
HealthPlotOpt = Annotated[Path | None, typer.Option("--plot", metavar="FILE.png|svg|pdf", show_default=False,
                                                    help="Write the gradient health chart as a picture "
                                                         "(needs gradflow[plot]).")]
HELP_END = help_end([
    "gradflow inspect examples/frozen_encoder.py:main",
    "gradflow inspect examples/frozen_encoder.py:main --only-problems",
    "gradflow inspect examples/transformer_block.py:main --expand --json",
    "gradflow inspect examples/frozen_encoder.py:main --graph mermaid -o m.mmd",
    "gradflow inspect examples/frozen_encoder.py:main --graph svg --autograd -o ops.svg",
    "gradflow inspect examples/frozen_encoder.py:main --fail-on cut,unused --allow 'aux_head.*'    # exit 6: "
    "adapter is cut",
    "gradflow inspect examples/train_step.py:step --arg batch_size=4 --fail-on untrained,orphan    # exit 6",
    "gradflow inspect examples/layer_scale.py:main --health --plot health.png",
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.NO_GRADIENT, ExitCode.PARTIAL, ExitCode.USER_CODE,
    ExitCode.GATE, ExitCode.INTERRUPTED],
    {ExitCode.INPUT: "bad input: no such file or function, a loss that is not a real scalar, an inference "
                     "tensor reused in training",
     ExitCode.NO_GRADIENT: "no gradient: the loss does not require grad",
     ExitCode.PARTIAL: "partial: some parameters could not be traced (untraced); the rest of the report stands",
     ExitCode.USER_CODE: "your code failed: it raised or exited (your frames of the traceback are shown), or ended "
                                  "the process (os._exit, a signal, a crash in C)",
     ExitCode.GATE: "--fail-on: some parameter is in a class you asked to fail on (listed after the report)"})


def split_target(target: str) -> tuple[Path, str]:
    path, colon, func = target.rpartition(":")
    if not colon or not path or not func.isidentifier():
        raise ValueInputError("usage", f"expected FILE.py:FUNCTION, got '{target}'",
                              hint="gradflow inspect examples/frozen_encoder.py:main")
    return Path(path), func


def find_file(path: Path):
    """The user's file as an import spec; checked before torch is imported (an early error stays fast)."""
    if not path.is_file():
        raise ValueInputError("file_not_found", f"no such file: {path}", hint="give FILE.py:FUNCTION")
    spec = importlib.util.spec_from_file_location(f"gradflow_user_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueInputError("bad_file", f"cannot import {path} as Python", hint="give a .py file")
    return spec


def load_function(path: Path, name: str):
    """Import the user's file as a module and return its FUNCTION (their folder is on sys.path: `contained`)."""
    spec = find_file(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    func = getattr(module, name, None)
    if not callable(func):
        known = [k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == spec.name]
        raise ValueInputError("no_function", f"{path} has no function '{name}'",
                              hint=f"functions defined there: {', '.join(known) or 'none'}")
    return func


def run_function(func, name: str, kwargs: dict | None = None, autograd: bool = False, failures=None):
    """Call FUNCTION (with the --arg values) under a trace; return (trace, loss, params, optimizer). `autograd`:
    the trace also names torch's autograd nodes (--autograd); `failures`: a FailureLog the trace fills (why a
    backward failed)."""
    from gradflow.report.build import failure_error, trace

    check_call(func, name, kwargs or {})
    t = trace(autograd=autograd, failures=failures)
    try:
        with t:
            value = func(**(kwargs or {}))
    except BaseException as err:
        failure = t.failure_of(err)
        if failure is not None:
            raise failure_error(failure) from None
        raise
    return (t, *unpack(value))


@dataclass
class Opts:
    json_: bool = False
    only_problems: bool = False
    expand: bool = False
    depth: int = 2
    graph: str | None = None
    output: Path | None = None
    fail_on: tuple[str, ...] = ()
    allow: tuple[str, ...] = ()
    arg: tuple[str, ...] = ()  # --arg NAME=VALUE, as given
    kwargs: dict = field(default_factory=dict)  # ... and parsed
    health: bool = False
    plot: Path | None = None
    library_lines: bool = False
    html: Path | None = None
    autograd: bool = False  # --autograd: torch's graph of ops instead of the modules
    op_depth: int | None = None  # --depth as given (the op graph draws every op without it)


def _picture(report, o: Opts, ops=None):
    """dot / mermaid text, or svg / png bytes rendered by Graphviz (as `gradflow graph` does); `ops`: the
    autograd graph (--autograd) drawn instead of the modules."""
    from gradflow.cli.graph_command import graphviz, write_out
    from gradflow.report.module_picture import to_dot, to_mermaid

    if ops is not None:
        text = (ops.to_mermaid() if o.graph == "mermaid" else ops.to_dot()).rstrip("\n")
    else:
        text = (to_mermaid if o.graph == "mermaid" else to_dot)(report, o.depth)
    write_out(graphviz(text, o.graph) if o.graph in ("svg", "png") else text + "\n", o.output)


def _emit(report, o: Opts, ops=None):
    """Print the report; a reader that stops early (`| head`) ends the output quietly."""
    try:
        if o.json_:
            from gradflow.values.jsonable import dumps

            print(dumps({**report.to_dict(), "health": report.health().to_dict()}) if o.health else
                  report.to_json(), flush=True)
        elif o.health:
            from rich.text import Text

            from gradflow.render.health import chart

            out, err = consoles()
            out.print(chart(report.health(), columns=out.width), soft_wrap=True)
            for w in report.warnings:  # as under the table
                err.print(Text(f"warning: {w}", style="yellow"))
        elif o.graph in ("dot", "mermaid", "svg", "png"):
            _picture(report, o, ops)
        elif o.graph == "tree":
            from gradflow.report.param_table import module_tree

            consoles()[0].print(module_tree(report))
        else:
            from gradflow.report.param_table import print_report

            print_report(report, *consoles(), o.depth, o.expand, o.only_problems)
    except BrokenPipeError:
        stdout_gone()


def inspect_cmd(target: TargetArg, json_: options.JsonOpt = False, only_problems: OnlyProblemsOpt = False,
                expand: ExpandOpt = False, depth: DepthOpt = None, graph: GraphOpt = None,
                output: options.OutOpt = None, fail_on: FailOnOpt = None, allow: AllowOpt = None, arg: ArgOpt = None,
                debug: options.DebugOpt = False, health: HealthOpt = False, plot: HealthPlotOpt = None,
                library_lines: LibraryLinesOpt = False, html: options.HtmlOpt = None, autograd: AutogradOpt = False):
    """Run your own PyTorch code and show which parameters get gradient — and why not."""
    o = Opts(json_, only_problems, expand, depth or 2, graph, output, tuple(fail_on or ()), tuple(allow or ()),
             tuple(arg or ()), health=health, plot=plot, library_lines=library_lines, html=html,
             autograd=autograd, op_depth=depth)
    exit_hard()  # the user's threads, exit handlers and objects must not hang or crash the exit (user_code.py)

    def body() -> int:
        try:
            return _inspect(target, o)
        except GradflowError as err:
            if not json_ or debug:
                raise
            return report_error(err, error_document(err))

    guarded(debug, json_, body)


def error_document(err: GradflowError) -> dict:
    """--json's document when the run fails: no loss, no parameters, the error."""
    from gradflow.analysis.explanation import SCHEMA_VERSION

    return {"schema": SCHEMA_VERSION, "loss": None, "params": [], "error": err.to_dict()}


def _check_options(o: Opts):
    if o.graph is not None and o.graph not in GRAPHS:
        raise ValueInputError("usage", f"unknown --graph format '{o.graph}'", hint="use " + ", ".join(GRAPHS))
    if o.graph is not None and o.json_:
        raise ValueInputError("usage", "give either --json or --graph, not both")
    if o.output is not None and o.graph in (None, "tree"):
        raise ValueInputError("usage", "--output writes a picture: use it with --graph dot, mermaid, svg or png")
    refuse_binary_on_terminal(o.graph, o.output, "--graph")
    if o.allow and not o.fail_on:
        raise ValueInputError("usage", "--allow names parameters the --fail-on gate lets pass: give --fail-on too",
                              hint="e.g. --fail-on cut,unused --allow 'aux_head.*'")
    if o.fail_on:
        o.fail_on = parse_classes(o.fail_on)
    o.kwargs = parse_args(list(o.arg))
    if o.health and o.graph is not None:
        raise ValueInputError("usage", "give either --health or --graph, not both")
    if o.autograd and o.graph in (None, "tree") and o.html is None:
        raise ValueInputError("usage", "--autograd draws a picture: use it with --graph dot, mermaid, svg or png, "
                                       "or with --html FILE.html",
                              hint="gradflow inspect FILE.py:FUNCTION --graph svg --autograd -o ops.svg")
    if o.plot is not None:
        from gradflow.render.plot import check_picture_path

        check_picture_path(str(o.plot), "--health draws the chart in the terminal")  # before running any code


def _inspect(target: str, o: Opts) -> int:
    """The command's work: load, trace, explain, print; returns the exit code."""
    _check_options(o)
    path, name = split_target(target)
    find_file(path)
    preload()
    from gradflow.tracer.failure_log import FailureLog

    log = FailureLog()
    with contained(str(path.resolve().parent)) as user, _explaining(log):
        func = user.run(f"importing {path}", load_function, path, name)
        t, loss, params, optimizer = user.run(f"{name}()", run_function, func, name, o.kwargs, o.autograd, log)
        report = user.run("backward", t.explain, loss, params=params, optimizer=optimizer, all_errors=False)
        del loss, params, optimizer  # the report holds the only reference to the loss left here
    ops = _autograd(report, t, o)
    del t
    if o.library_lines:
        report.show_library_lines()
    threads = user.leftover_threads()
    if threads:
        report.warnings.append(_threads_warning(threads))
    if o.fail_on:
        report.gate = gate_document(report, o.fail_on, o.allow)
    if o.html is not None:
        from gradflow.render.html_report import autograd_section, inspect_section

        write_html(o.html, f"gradflow inspect {target}", [inspect_section(report, target, o.depth),
                                                           *([autograd_section(ops, target)] if ops else [])])
    try:
        _emit(report, o, ops)
        if o.plot is not None:
            _write_plot(report, o.plot, target)
    finally:
        _free(report)
    code = 0 if report.error is None else report_error(report.error)
    return _gate(report, o) or code


def _autograd(report, t, o: Opts):
    """--autograd: torch's graph of the loss, named from the trace (None without --autograd)."""
    if not o.autograd:
        return None
    from gradflow.report.op_graph import autograd_graph

    return autograd_graph(report, t, o.op_depth)


@contextlib.contextmanager
def _explaining(log):
    """The user's code failed in a backward (their own, or the report's): why, and the fix, when gradflow knows."""
    from gradflow.errors import UserCodeError
    from gradflow.tracer.failures import explained

    try:
        yield
    except UserCodeError as err:
        explained(err, log, err.__cause__)
        raise


def _gate(report, o: Opts) -> int:
    if not o.fail_on:
        return 0
    from gradflow.report.fail_on import failures, gate_error, unmatched

    found = failures(report, o.fail_on, o.allow)
    return print_gate(unmatched(report, o.allow), gate_error(found, o.fail_on) if found else None)


def print_gate(unmatched_allow, error: GradflowError | None) -> int:
    """--fail-on, after the report (inspect, ddp): the --allow patterns that matched nothing, then what failed and
    why (stderr); the exit code, 6 if anything failed."""
    for pat in unmatched_allow:
        consoles()[1].print(f"warning: --allow '{pat}' matches no parameter", style="yellow", markup=False,
                            highlight=False)
    return 0 if error is None else report_error(error)


def _write_plot(report, path: Path, target: str):
    from rich.text import Text

    from gradflow.cli.files import write_file
    from gradflow.render.health import picture

    write_file(path, picture(report.health(), path, f"gradient norm per layer: {target}"))
    consoles()[1].print(Text(f"wrote {path}"), soft_wrap=True)


def _threads_warning(threads) -> str:
    names = ", ".join(t.name for t in threads[:3]) + (f" (+{len(threads) - 3} more)" if len(threads) > 3 else "")
    return (f"your code left {len(threads)} thread{'s' * (len(threads) != 1)} running ({names}); gradflow "
            "exits without waiting for them")


def _free(report):
    """Free the loss's autograd graph from the loss backwards: a long chain freed by torch alone can overflow
    the C stack (tracer/teardown.py)."""
    from gradflow.tracer.teardown import free_graph

    holder, report.loss = [report.loss], report.loss.detach()
    free_graph(holder)
