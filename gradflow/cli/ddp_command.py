"""`gradflow ddp FILE.py:FUNCTION --nproc N`: inspect's verdicts on every rank of a real DDP group.

Started by a user, it launches N ranks (gradflow/ddp/launch.py: plain child processes, gloo on 127.0.0.1, a free
port) and prints what rank 0 gathered; it never imports torch itself. Started as a rank (RANK and WORLD_SIZE set,
by that launcher or by torchrun), it runs the rank (cli/ddp_rank.py); under torchrun rank 0 prints the report.
"""
from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from gradflow.cli import options
from gradflow.cli.common import consoles, guarded
from gradflow.cli.help import help_end
from gradflow.cli.inspect_command import GATE_CLASSES, AllowOpt, find_file, print_gate, split_target
from gradflow.cli.streams import exit_hard
from gradflow.errors import ExitCode, ValueInputError

TargetArg = Annotated[str, typer.Argument(
    help="FUNCTION(rank, world_size) builds the model and returns (model, step); step(model) returns the loss.",
    show_default=False, metavar="FILE.py:FUNCTION")]
NprocOpt = Annotated[int, typer.Option("--nproc", metavar="N",
                                       help="Ranks to start (ignored under torchrun, which starts them).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                           help="Longest wait for any collective; a rank that makes the others "
                                                "wait longer is reported as hung.")]
FailOnOpt = Annotated[list[str] | None, typer.Option(
    "--fail-on", metavar="CLASSES", help="Exit 6 if a parameter is in one of these classes (comma-separated) on "
                                         "some rank: unused (no gradient on any rank), divergent (a gradient on "
                                         "some ranks only), and inspect's "
                                         + ", ".join(c for c in GATE_CLASSES if c != "unused")
                                         + " (per rank); or default, all.")]
HELP_END = help_end([
    "gradflow ddp examples/ddp_aux_loss.py:main --nproc 2",
    "gradflow ddp examples/ddp_unused_head.py:main --json",
    "gradflow ddp examples/ddp_empty_batch.py:main --fail-on unused,divergent  # exit 6",
    "gradflow ddp examples/ddp_detached.py:main --fail-on default,divergent --allow 'adapter.*'  # exit 0",
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.NO_GRADIENT, ExitCode.USER_CODE, ExitCode.GATE,
    ExitCode.DISTRIBUTED, ExitCode.INTERRUPTED],
    {ExitCode.INPUT: "bad input: no such file or function, FUNCTION does not return (model, step)",
     ExitCode.NO_GRADIENT: "no gradient: the loss does not require grad on some rank",
     ExitCode.USER_CODE: "your code failed on some rank (its rank and your frames are shown)",
     ExitCode.GATE: "a --fail-on class matched on some rank (listed after the report, with the ranks)",
     ExitCode.DISTRIBUTED: "a rank died, hung or timed out; the other ranks were stopped"})


def ddp_cmd(target: TargetArg, nproc: NprocOpt = 2, timeout: TimeoutOpt = 60.0, fail_on: FailOnOpt = None,
            allow: AllowOpt = None, json_: options.JsonOpt = False, debug: options.DebugOpt = False):
    """Run your training step on N real DDP ranks: which parameters get no gradient, on which rank, and why.

    gradflow starts the ranks (gloo on 127.0.0.1); under torchrun (RANK and WORLD_SIZE set) it starts none and
    rank 0 prints: torchrun --nproc-per-node 2 -m gradflow ddp FILE.py:FUNCTION
    """
    exit_hard()
    guarded(debug, json_, lambda: _ddp(target, nproc, timeout, tuple(fail_on or ()), tuple(allow or ()), json_,
                                       debug))


def _classes(fail_on: tuple[str, ...], allow: tuple[str, ...]) -> tuple[str, ...]:
    if allow and not fail_on:
        raise ValueInputError("usage", "--allow names parameters the --fail-on gate lets pass: give --fail-on too",
                              hint="e.g. --fail-on unused,divergent --allow 'aux_head.*'")
    if not fail_on:
        return ()
    from gradflow.ddp.fail_on import classes

    return classes(fail_on)


def _ddp(target: str, nproc: int, timeout: float, fail_on: tuple[str, ...], allow: tuple[str, ...], json_: bool,
         debug: bool) -> int:
    from gradflow.ddp.launch import ENV_STATUS, under_launcher

    classes = _classes(fail_on, allow)
    if not 1 <= nproc <= 64:
        raise ValueInputError("usage", f"--nproc must be between 1 and 64, got {nproc}", hint="--nproc 2")
    if not timeout >= 0.5:
        raise ValueInputError("usage", f"--timeout must be at least 0.5 seconds, got {timeout:g}", hint="--timeout 60")
    path, name = split_target(target)
    find_file(path)
    me = under_launcher()
    if me is None:
        args = [target, "--timeout", str(timeout), *(["--debug"] if debug else []),
                *(["--fail-on", ",".join(classes)] if classes else []), *(x for a in allow for x in ("--allow", a))]
        doc = _launch(args, nproc, timeout)
    else:
        doc = _rank(path, name, target, timeout, me, classes, allow)
        if ENV_STATUS in os.environ:  # gradflow's launcher reads rank 0's document and prints it
            if me[0] == 0:
                print(json.dumps(doc, allow_nan=False), flush=True)
            return 0
        if me[0] != 0:
            return _code(doc)  # under torchrun only rank 0 prints
    return _show(doc, json_)


def _rank(path, name: str, target: str, timeout: float, me: tuple[int, int], classes: tuple[str, ...],
          allow: tuple[str, ...]) -> dict:
    from gradflow.cli.ddp_rank import run_rank
    from gradflow.ddp.launch import tell
    from gradflow.errors import DistributedError

    try:
        doc, _ = run_rank(path, name, target, timeout, classes, allow)
    except DistributedError as err:
        tell(f"fail {err.message}")
        raise
    tell("done 0")
    return doc


def _launch(args: list[str], nproc: int, timeout: float) -> dict:
    from gradflow.ddp.launch import launch
    from gradflow.errors import DistributedError

    err = consoles()[1]
    from rich.text import Text

    outcome = launch(args, nproc, timeout, lambda r, line: err.print(Text(f"[rank {r}] {line}"), soft_wrap=True))
    if outcome.died or outcome.hung:
        raise DistributedError("rank_lost", _lost(outcome, timeout),
                               hint="run FUNCTION on that rank alone (gradflow inspect), or raise --timeout if it "
                                    "is only slow")
    try:
        return json.loads(outcome.report)
    except ValueError:
        said = next((rk.failed for rk in outcome.ranks if rk.failed), None)
        raise DistributedError("rank_lost", said or "rank 0 gave no report",
                               hint="rerun with --debug to see each rank's traceback") from None


def _lost(outcome, timeout: float) -> str:
    parts = [f"rank {rk.rank} {rk.death()} while {rk.at}" for rk in outcome.died]
    parts += [f"rank {rk.rank} hung while {rk.at} (no answer within {timeout:g} s)" for rk in outcome.hung
              if not outcome.died]
    stopped = [str(rk.rank) for rk in outcome.ranks if rk.stopped or (outcome.died and rk not in outcome.died)]
    tail = (f"; rank{'s' * (len(stopped) > 1)} {', '.join(stopped)} {'were' if len(stopped) > 1 else 'was'} "
            "stopped") if stopped else ""
    return "; ".join(parts) + tail


def _code(doc: dict) -> int:
    if doc.get("error"):
        return int(doc["error"].get("exit_code", ExitCode.USER_CODE))
    return int(ExitCode.GATE) if doc.get("gate") and not doc["gate"]["passed"] else 0


def _show(doc: dict, json_: bool) -> int:
    if doc.get("error"):
        from gradflow.cli.ddp_rank import error_from

        raise error_from(doc)
    if json_:
        from gradflow.values.jsonable import dumps

        print(dumps(doc), flush=True)
    else:
        from gradflow.ddp.report_text import print_report

        print_report(doc, *consoles())
    if doc.get("gate"):
        from gradflow.ddp.fail_on import error

        print_gate(doc["gate"]["unmatched_allow"], error(doc["gate"], doc["world_size"]))
    return _code(doc)
