"""The optional views `gradflow eval` adds on request: --check, --order 2, --graph FORMAT.

Computed before anything is printed (so an error exits cleanly); cli/eval_command.py prints them under the
table, or adds them to the JSON as the fields "check", "hessian" and "graph".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradflow.errors import ValueInputError

EVAL_GRAPH_FORMATS = ("tree", "dot", "mermaid")


@dataclass
class Extras:
    check: Any = None  # CheckResult
    hessian: Any = None  # HessianResult
    graph: Any = None  # Picture
    graph_format: str | None = None

    @classmethod
    def compute(cls, result, *, check: bool = False, order: int = 1,
                graph: str | None = None) -> Extras:
        if graph is not None and graph not in EVAL_GRAPH_FORMATS:
            raise ValueInputError("usage", f"eval --graph takes tree, dot or mermaid, not '{graph}'",
                                  hint='for svg/png use: gradflow graph "EXPR" --format svg -o graph.svg')
        if order not in (1, 2):
            raise ValueInputError("usage", f"--order must be 1 or 2, not {order}")
        extras = cls(graph_format=graph)
        if check:
            extras.check = _check(result)
        if order == 2:
            from gradflow.studies.hessian import from_explanation

            extras.hessian = from_explanation(result)
        if graph is not None:
            from gradflow.studies.torch_graph import picture

            extras.graph = picture(result)
        return extras


def _check(result):
    """The numeric check runs in float64: the same program and values, evaluated again in float64."""
    from gradflow.engine.evaluate import evaluate
    from gradflow.studies.numcheck import run_check

    check = run_check(evaluate(result.graph, result.inputs, result.wrt, dtype="float64"))
    if result.dtype in ("float16", "bfloat16"):
        from gradflow.analysis.smooth import Note

        check.notes.insert(0, Note("", f"the program ran in {result.dtype}, but this check computes in float64, as "
                                       f"the oracle: its autograd column is float64's (the table's grads are "
                                       f"{result.dtype}'s; where they differ, {result.dtype} lost it)"))
    return check
