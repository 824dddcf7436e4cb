"""The extras of `gradflow eval` (--check, --order 2, --graph) under the table, or as extra JSON fields.

The existing JSON fields are never changed; "check", "hessian" and "graph" are added.
"""
from __future__ import annotations

from gradflow.render.checks import check_table, hessian_view, note_lines
from gradflow.render.graph import print_picture, to_dot, to_mermaid
from gradflow.studies.eval_extras import Extras


def add_to(extras: Extras, doc: dict) -> dict:
    if extras.check is not None:
        doc["check"] = extras.check.to_dict()
    if extras.hessian is not None:
        doc["hessian"] = extras.hessian.to_dict()
    if extras.graph is not None:
        doc["graph"] = {**extras.graph.to_dict(), "format": extras.graph_format, "text": _text(extras)}
    return doc


def _text(extras: Extras) -> str | None:
    render = {"dot": to_dot, "mermaid": to_mermaid}.get(extras.graph_format or "")
    return None if render is None else render(extras.graph)


def print_extras(extras: Extras, out) -> None:
    if extras.check is not None:
        out.print(check_table(extras.check))
        if extras.check.notes:
            out.print(note_lines(extras.check.notes))
    if extras.hessian is not None:
        out.print(hessian_view(extras.hessian))
    if extras.graph is not None:
        print_picture(extras.graph, extras.graph_format or "tree", out)
