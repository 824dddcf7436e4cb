"""Every start-up trick of the `gradflow` command, in one place; bench/README.md has the figure for each.

Only the command calls these (cli/app.py `run`, cli/streams.py, cli/eval_command.py): importing any gradflow
module leaves the process as it is.
"""
from __future__ import annotations

import gc

from gradflow import compat

_GC_WAS_ON = gc.isenabled()


def before_run() -> None:
    """Typer's coercion without pydantic (gradflow/compat.py): a syntax error's start-up would import it."""
    compat.typer_coercion_without_pydantic()


def before_exit() -> None:
    """Torch's million objects live until the end: frozen, the interpreter's shutdown collections skip them."""
    gc.freeze()


def pause_collector() -> None:
    """One evaluation, from parsing to its printed output: its graph, tensors and results live until then, and
    every collection while they pile up would walk them all again. What the evaluation makes is still freed by
    reference counting as it goes; only cycles wait for `resume_collector()` (many evaluations: resume first)."""
    gc.disable()


COLLECT_EVERY = 100  # records between two collections of the young objects


def collect_young(records: int) -> None:
    """While the collector is paused for many evaluations (a batch, after its `records`-th record): every
    COLLECT_EVERY records, free the cycles the latest ones left, walking only the objects made since. What has
    lived longer (torch's objects, the parse cache's graphs) is not walked again: with the collector on, every
    full collection walked it all, and over a batch of distinct programs, as the cache grows, they took longer
    each time."""
    if records % COLLECT_EVERY == 0:
        gc.collect(1)


def resume_collector() -> None:
    if _GC_WAS_ON:
        gc.enable()
