"""Program text -> checked, lowered Graph, once per distinct text and limits (batch and sweeps reuse it).

Torch-free: a syntax error or a limit is found before torch is imported.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from gradflow.language.checks import check_graph, check_source, check_tree
from gradflow.language.parser import parse
from gradflow.limits import Limits, current

if TYPE_CHECKING:  # the node classes load on first use: a syntax error needs none of them
    from gradflow.language.graph import Graph


def compile_program(source: str, limits: Limits | None = None) -> Graph:
    """Parse and lower once per distinct text (batch and sweeps reuse it), within `limits`
    (default: the limits in force, see `limits.using`)."""
    return _compile(source, current() if limits is None else limits)


@functools.lru_cache(maxsize=1024)
def _compile(source: str, limits: Limits) -> Graph:
    check_source(source, limits)
    program = parse(source)  # first: a syntax error never loads syntax.py
    check_tree(program, limits)
    from gradflow.language.graph import lower

    graph = lower(program)
    check_graph(graph, limits)
    return graph


compile_program.cache_info = _compile.cache_info  # type: ignore[attr-defined]
compile_program.cache_clear = _compile.cache_clear  # type: ignore[attr-defined]
