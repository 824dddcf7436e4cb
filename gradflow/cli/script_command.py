"""`gradflow script FILE.py`: run the user's own script as it is; at every backward(), show what it named.

The file is run as `python FILE.py` would run it (it is the user's own code: running it is the point). At each
backward() call the table of the tensors the script has named, the leaves' grads and the `gradflow eval`
program that reproduces it go to stdout, as they happen; whatever the script prints goes to stderr, so in a
terminal both read in the order they happened and `--json` keeps stdout pure JSON Lines. torch is imported
only when the command runs.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from gradflow.cli import options
from gradflow.cli.common import consoles, guarded, option_owners, report_error, write_html
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode, GradflowError, ValueInputError

FileArg = Annotated[Path, typer.Argument(help="The Python script to run, as `python FILE.py` would.",
                                         show_default=False, metavar="FILE.py")]
ArgsArg = Annotated[list[str] | None, typer.Argument(
    help="Arguments for the script (its sys.argv[1:]); put them after -- when they start with -.",
    show_default=False, metavar="ARGS")]
JsonLinesOpt = Annotated[bool, typer.Option("--json", help="One JSON record per backward() call (JSON Lines).")]
EveryOpt = Annotated[int | None, typer.Option(
    "--every", metavar="N", min=1, help="In a loop: a line for every N-th backward() call (default: the first 10, "
                                       "then the 20th, 30th, …, 100th, 200th, …).")]
StepsOpt = Annotated[str | None, typer.Option(
    "--steps", metavar="A:B", help="Show backward() calls A to B in full, their ops recorded (cuts named, the eval "
                                   "program written); A: or :B leave an end open.")]
LoopFullOpt = Annotated[bool, typer.Option(
    "--full", help="Every backward() call in full, each step recorded (as before loops were folded; slower).")]
LoopBriefOpt = Annotated[bool, typer.Option(
    "--brief", help="With --json: a small record per backward() call (loss, how many got gradient, largest and "
                    "smallest grad norm, changes), then a summary record. Nothing is recorded per op: fast.")]
AutogradOpt = Annotated[bool, typer.Option(
    "--autograd", help="Also draw the autograd graph torch recorded for each backward() shown in full (in a loop "
                       "the first; --steps picks others): a node per op, named by your lines and variables, cuts "
                       "red at their line, frozen parameters grey, repeated blocks folded. -o writes it; --html "
                       "shows it.")]
GraphOutOpt = Annotated[Path | None, typer.Option(
    "--output", "-o", metavar="PATH", help="With --autograd: write backward K's graph to PATH with -K before its "
                                          "suffix (ops.svg: ops-1.svg), in the format the suffix names: .svg .png "
                                          ".pdf (Graphviz), .dot, .mmd.")]
GraphDepthOpt = Annotated[int | None, typer.Option(
    "--depth", min=1, metavar="INTEGER", show_default=False,
    help="With --autograd: draw each module at this depth as one node (default: every op).")]
HELP_END = help_end([
    "gradflow script examples/classic_2018.py",
    "gradflow script examples/classic_2018.py --json",
    "gradflow script examples/train_loop.py --steps 40:41",
    "gradflow script examples/classic_2018.py --autograd -o ops.svg",
    "gradflow script train.py --json -- --epochs 1  # exit 2: no train.py here",
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.NO_GRADIENT, ExitCode.USER_CODE,
    ExitCode.INTERRUPTED],
    {ExitCode.INPUT: "bad input: no such file, or an option",
     ExitCode.USER_CODE: "your script failed: it raised, could not be compiled, exited with a failure status, or "
                          "ended the process (os._exit, a signal, a crash in C)",
     ExitCode.NO_GRADIENT: "no gradient: the script never called backward(), or its backward failed "
                           "because nothing required grad"})


class _Emitter:
    """Called at each backward(): prints to the real stdout while the script's own prints go to stderr."""

    def __init__(self, json_: bool, stdout, options: set[str], summary: bool = False, html: bool = False,
                 plan: LoopPlan | None = None, graphs: Graphs | None = None):
        from gradflow.script.loop import LoopWatch
        from gradflow.script.optimizer import OptimizerWatch

        self.json, self.stdout, self.options, self.gone = json_, stdout, options, False
        self.summary = summary
        self.plan = plan or LoopPlan(full=html)
        self.graphs = graphs  # --autograd
        self.sections: list | None = [] if html else None  # --html: each call's part of the page, drawn as it
                                                            # happens (the script goes on changing its tensors)
        self.pid = os.getpid()
        self.loop, self.optimizers = LoopWatch(), OptimizerWatch()
        self.shown = [0, 0]  # calls shown as a line, in full
        self._out = None
        self.repeated = False  # the last call was made at a line seen before: the script is looping

    def records(self, index: int) -> bool:
        """Record the ops before backward `index`? Always while every call is new (a script of single backward()
        calls is shown in full); in a loop, only the calls --steps or --full ask for."""
        plan = self.plan
        if plan.brief:
            return plan.in_steps(index)
        return plan.full or self.json or not self.repeated or index == 1 or plan.in_steps(index)

    def __call__(self, call):
        from gradflow.cli.streams import to_devnull
        from gradflow.script.run import StopScript

        if os.getpid() != self.pid:  # a process the script forked: only the process gradflow started reports
            return
        try:
            sys.stderr.flush()  # the script's prints so far come first, in whatever order the streams are read
            with contextlib.redirect_stdout(self.stdout):
                graph = self._print(call)
            if self.sections is not None:
                from gradflow.render.html_report import autograd_section, backward_section

                self.sections.append(backward_section(call))
                if graph is not None:
                    self.sections.append(autograd_section(graph, f"backward {call.index}"))
        except (BrokenPipeError, SystemExit):  # the reader went away (| head; rich exits on it): stop the
            self.gone = True  # script there, quietly; what the stream still buffers goes to /dev/null
            to_devnull(self.stdout)
            raise StopScript from None

    def _print(self, call):
        """The call's report (or JSON record), then its autograd graph (--autograd), which it returns."""
        step = self.loop.see(call)
        self.repeated = not step.first
        self.optimizers.at_backward(call)
        findings = self.optimizers.fresh()
        if self.json:
            graph, path = self._graph(call)
            self._json(call, step, findings, None if graph is None else self.graphs.record(graph, path))
            return graph
        from gradflow.script.loop import shows_line
        from gradflow.script.loop_view import StepLine, changes_head, finding_lines

        out = self._console()
        if self.plan.full or step.first or step.changes or self.plan.in_steps(call.index):
            if step.changes:
                out.print(changes_head(step))
            self._full(call, out)
        elif shows_line(call.index, self.plan.every):
            self.shown[0] += 1
            out.print(StepLine(step), soft_wrap=True)
        if findings:
            out.print(finding_lines(findings), soft_wrap=True)
        sys.stdout.flush()
        graph, path = self._graph(call)
        if graph is not None:
            from rich.text import Text

            out.print(Text(Graphs.line(graph, path)), soft_wrap=True)
            sys.stdout.flush()
        return graph

    def _graph(self, call):
        """--autograd: the graph of a backward() shown in full whose ops were recorded, and the file it was
        written to (-o)."""
        g = self.graphs
        if g is None or call.autograd_ops is None or not (g.every or not self.repeated or
                                                          self.plan.in_steps(call.index)):
            return None, None
        graph = call.autograd_graph(g.depth)
        return graph, g.write(graph, call.index)

    def _console(self):
        """stdout's console, made once: a loop prints through it at every backward()."""
        if self._out is None:
            self._out = consoles()[0]
        return self._out

    def _full(self, call, out):
        from rich.text import Text

        from gradflow.script.backward_table import backward_view, program_line

        self.shown[1] += 1
        out.print(backward_view(call, out.width))
        out.print(Text(program_line(call, self.options)), soft_wrap=True)  # never wrapped: copy it whole
        out.print()

    def _json(self, call, step, findings, graph: dict | None):
        from gradflow.script.backward_table import record
        from gradflow.values.jsonable import document, dumps

        extra = {"findings": [f.to_dict() for f in findings], **({"autograd": graph} if self.graphs else {})}
        if self.plan.brief:
            text = dumps({**step.to_dict(), **extra})
        else:
            with document(self.summary):
                text = dumps({**record(call, self.options), "changes": step.changes, **extra})
        print(text, flush=True)

    def end(self) -> None:
        """The loop's summary, after the script's last backward() (also when it failed later)."""
        if self.gone or os.getpid() != self.pid:
            return
        from gradflow.script.loop_view import summary, summary_record

        with contextlib.redirect_stdout(self.stdout):
            if self.json and self.plan.brief:
                from gradflow.values.jsonable import dumps

                print(dumps(summary_record(self.loop, self.optimizers)), flush=True)
            elif not self.json and any(made > 1 for made, _ in self.loop.lines.values()):
                out = self._console()
                out.print(summary(self.loop, self.optimizers, *self.shown), soft_wrap=True)
                sys.stdout.flush()


class LoopPlan:
    """What the loop options ask: --full, --every N, --steps A:B, --brief."""

    def __init__(self, full: bool = False, every: int | None = None, steps: str | None = None, brief: bool = False):
        self.full, self.every, self.brief = full, every, brief
        self.steps = _steps(steps) if steps is not None else None

    def in_steps(self, index: int) -> bool:
        if self.steps is None:
            return False
        a, b = self.steps
        return a <= index and (b is None or index <= b)


class Graphs:
    """What --autograd asks: each graph's depth, where it is written (-o), and whether every backward() is drawn
    (--full; else those shown in full: the first at each line, --steps)."""

    def __init__(self, output: Path | None, depth: int | None, every: bool):
        self.output, self.depth, self.every = output, depth, every
        if output is not None:  # before the script runs: a bad name or a missing Graphviz fails at once
            from gradflow.render import graphviz
            from gradflow.render.views import picture_format

            fmt = picture_format(output)
            if fmt not in ("dot", "mermaid") and not graphviz.available():
                graphviz.graphviz("", fmt, asked=f"-o {output.name}")  # raises its own "install Graphviz"

    def write(self, graph, index: int) -> Path | None:
        if self.output is None or graph.root is None:
            return None
        from gradflow.cli.files import write_file
        from gradflow.render.views import picture

        path = self.output.with_name(f"{self.output.stem}-{index}{self.output.suffix}")
        write_file(path, picture(graph, path, f"-o {path.name}"))
        return path

    @staticmethod
    def record(graph, path: Path | None) -> dict:
        """The graph in a --json record: what the line under a table says."""
        return {"file": None if path is None else str(path), "nodes": len(graph.nodes),
                "torch_nodes": graph.recorded if graph.root is not None else 0, "edges": len(graph.edges),
                "cuts": sum(n.kind == "cut" for n in graph.nodes.values()), "folded": [f.label for f in graph.folds]}

    @staticmethod
    def line(graph, path: Path | None) -> str:
        """`autograd graph of L: backward 1 at x.py:17: 5 nodes for torch's 4, 5 edges, 1 cut → ops-1.svg`"""
        if graph.root is None:  # backward failed on it, or will
            return f"{graph.title}: none (what backward() ran from has no grad_fn: torch recorded no graph)\n"
        r = Graphs.record(graph, path)
        cuts = r["cuts"]
        folds = "".join(f", {label} folded" for label in r["folded"])
        where = f" → {path}" if path is not None else " (-o FILE.svg draws it)"
        return (f"{graph.title}: {r['nodes']} nodes for torch's {r['torch_nodes']}, {r['edges']} edges"
                f"{f', {cuts} cut' + 's' * (cuts != 1) if cuts else ''}{folds}{where}\n")


def _steps(text: str) -> tuple[int, int | None]:
    a, sep, b = text.partition(":")
    try:
        first = int(a) if a.strip() else 1
        last = (int(b) if b.strip() else None) if sep else first
    except ValueError:
        first = last = 0
    if first < 1 or (last is not None and last < first):
        raise ValueInputError("bad_option", f"--steps {text}: not a range of backward() calls",
                              hint="give A:B with 1 <= A <= B (the first backward() is 1), A: or :B, or one number")
    return first, last


def script_cmd(ctx: typer.Context, file: FileArg, args: ArgsArg = None, json_: JsonLinesOpt = False,
               debug: options.DebugOpt = False, summary: options.SummaryOpt = False, limit: options.LimitOpt = None,
               html: options.HtmlOpt = None, every: EveryOpt = None, steps: StepsOpt = None, full: LoopFullOpt = False,
               brief: LoopBriefOpt = False, autograd: AutogradOpt = False, output: GraphOutOpt = None,
               depth: GraphDepthOpt = None):
    """Run your own PyTorch script; at every backward(), show every tensor it has named, with its grad.

    In a loop, the first backward() at each line is shown in full, then a line per call (folded in long loops),
    a full report whenever something changes, the optimizers' findings, and a summary at the end."""

    def body() -> int:
        try:
            from gradflow.limits import as_limits, using

            if brief and not json_:
                raise ValueInputError("bad_option", "--brief shapes the JSON records: it goes with --json",
                                      hint="add --json, or leave --brief out (the text output is brief in a loop)")
            plan = LoopPlan(full or html is not None, every, steps, brief)
            graphs = _graphs(autograd, output, depth, full)
            with using(as_limits(limit)):  # the json limit: tensors printed in full per record
                # a variable named like any gradflow option goes through --var in the eval program (as
                # common.parse_values refuses it as --NAME)
                return _script(file, list(args or []), json_, set(option_owners(ctx)), summary, html, plan, graphs)
        except GradflowError as err:
            if not json_ or debug:
                raise
            return report_error(err, error_document(err))

    guarded(debug, json_, body)


def _graphs(autograd: bool, output: Path | None, depth: int | None, full: bool) -> Graphs | None:
    if not autograd:
        if output is not None or depth is not None:
            raise ValueInputError("bad_option", f"{'-o' if output is not None else '--depth'} draws the autograd "
                                  "graph: it goes with --autograd",
                                  hint="gradflow script FILE.py --autograd -o ops.svg")
        return None
    return Graphs(output, depth, full)


def _script(file: Path, args: list[str], json_: bool, options: set[str], summary: bool = False,
            html: Path | None = None, plan: LoopPlan | None = None, graphs: Graphs | None = None) -> int:
    from gradflow.cli.streams import stdout_gone
    from gradflow.cli.user_code import stdout_to_stderr
    from gradflow.script.run import run_script

    emit = _Emitter(json_, sys.stdout, options, summary, html is not None, plan, graphs)
    try:
        with stdout_to_stderr() as real:  # the script's output, fd 1 included, must not mix into the tables or JSON
            emit.stdout = _stream_on(real, emit.stdout)
            try:
                run_script(file, args, emit, emit.records, emit.optimizers, graphs is not None)
            finally:
                emit.end()
    finally:  # the page shows the calls made before a failure too
        if html is not None and emit.sections:
            write_html(html, f"gradflow script {file}", emit.sections)
    return stdout_gone() if emit.gone else 0


def _stream_on(fd: int | None, like):
    """A text stream on the real stdout's duplicate `fd`, encoded as stdout is (`like`); `like` itself when stdout
    is closed or is not fd 1 (a stream put in by a caller, as in tests). Its buffer is flushed after every
    record, so nothing is left in it when the fd is closed."""
    try:
        on_fd_1 = like.fileno() == 1
    except (OSError, ValueError, AttributeError):
        on_fd_1 = False
    if fd is None or not on_fd_1:
        return like
    encoding, errors = getattr(like, "encoding", None) or "utf-8", getattr(like, "errors", None) or "strict"
    return os.fdopen(fd, "w", encoding=encoding, errors=errors, closefd=False,  # noqa: SIM115 - closefd=False
                     buffering=1 if os.isatty(fd) else -1)


def error_document(err: GradflowError) -> dict:
    """--json's last line when the run fails: a record with no call, and the error."""
    from gradflow.analysis.explanation import SCHEMA_VERSION

    return {"schema": SCHEMA_VERSION, "call": None, "line": None, "code": None, "outputs": [],
            "retain_graph": False, "tensors": [], "grads": {}, "added": {},
            "eval": {"argv": None, "command": None, "why_not": None}, "error": err.to_dict()}
