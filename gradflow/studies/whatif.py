"""What if I cut here? Re-evaluate the program with one cut added or removed.

For every node on a live gradient path: the chosen leaves' grads if that node
were detached. For every existing detach / no_grad / inference_mode /
`requires_grad = false`: the grads if it were removed. Each scenario is a
rewritten Graph (language/edits.py), evaluated afresh; nothing edits program text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gradflow.analysis.explanation import Explanation
from gradflow.display import Shown
from gradflow.engine.prepare import merge_values, prepare
from gradflow.errors import GradflowError, LimitError, is_no_gradient
from gradflow.language.edits import Edit, cut_nodes, off_flags
from gradflow.language.graph import Graph
from gradflow.values.jsonable import dumps, one_document, to_jsonable

MAX_SCENARIOS = 300  # each scenario is a full evaluation: keep the quadratic cost bounded


@dataclass
class Scenario:
    """One what-if: the program with a single cut added or removed."""

    node: str  # label of the node detached, or the cut removed
    action: Literal["detach", "remove cut"]
    program: str  # what changed, e.g. "detach(x*y1)" or "x*y1 instead of detach(x*y1)"
    grads: dict[str, Any] = field(default_factory=dict)  # leaf -> tensor | None
    change: dict[str, Any] = field(default_factory=dict)  # leaf -> new - current (None if either is None)
    output: Any = None  # the output's value, if evaluation got that far
    error: GradflowError | None = None  # set when the rewritten program cannot run / backward cannot run

    @property
    def no_gradient(self) -> bool:
        return self.error is not None and is_no_gradient(self.error.kind)

    def to_dict(self) -> dict:
        return {"node": self.node, "action": self.action, "program": self.program,
                "output": to_jsonable(self.output), "grads": {k: to_jsonable(v) for k, v in self.grads.items()},
                "change": {k: to_jsonable(v) for k, v in self.change.items()},
                "no_gradient": self.no_gradient, "error": None if self.error is None else self.error.to_dict()}


@dataclass(repr=False)  # repr(): the table as text (display.Shown)
class WhatIf(Shown):
    """The current result and one Scenario per possible cut change."""

    current: Explanation
    scenarios: list[Scenario]

    @property
    def wrt(self) -> list[str]:
        return self.current.wrt

    @property
    def warnings(self) -> list:
        """The current program's warnings (an unused value, a value converted, nan/inf)."""
        return self.current.warnings

    @one_document
    def to_dict(self) -> dict:
        cur = self.current
        return {"source": cur.source, "wrt": list(cur.wrt),
                "current": {"output": to_jsonable(cur.output.value),
                            "grads": {k: to_jsonable(v) for k, v in cur.grads.items()}},
                "scenarios": [s.to_dict() for s in self.scenarios],
                "warnings": [w.to_dict() for w in cur.warnings]}

    def to_json(self, **kw) -> str:
        return dumps(self.to_dict(), **kw)


def run_graph(graph: Graph, values: dict, leaves: list[str], dtype: str, device: str):
    """(Explanation, None) or (None, the GradflowError the evaluation raised)."""
    from gradflow.engine.evaluate import evaluate

    try:
        return evaluate(graph, values, leaves, dtype=dtype, device=device), None
    except GradflowError as err:
        return None, err


def _diff(new, old):
    return None if new is None or old is None else new - old


def _scenario(base: Explanation, row: Scenario, result: Explanation | None, error) -> Scenario:
    if result is not None:
        row.output, error = result.output.value, result.error
    row.error = error
    row.grads = {leaf: None if result is None else result.grads.get(leaf) for leaf in base.wrt}
    row.change = {leaf: _diff(row.grads[leaf], base.grads[leaf]) for leaf in base.wrt}
    return row


def _edits(graph: Graph, base: Explanation):
    """(node label, action, what changed, edit function) for every possible single change."""
    for n in base.nodes:
        if n.status == "live" and n.op != "var":
            yield n.name, "detach", f"detach({n.name})", lambda e, i=n.id: e.detach_at(i)
    for c in cut_nodes(graph):
        inner = graph.nodes[c.args[0]].label
        yield c.label, "remove cut", f"{inner} instead of {c.text}", lambda e, i=c.id: e.remove_cut(i)
    for f in off_flags(graph):
        yield f.text, "remove cut", f"without `{f.text}`", lambda e, s=f: e.drop_flag(s)


def whatif_graph(graph: Graph, values: dict, leaves: list[str], dtype: str = "float32",
                 device: str = "cpu") -> WhatIf:
    from gradflow.engine.evaluate import evaluate

    base = evaluate(graph, values, leaves, dtype=dtype, device=device)
    edits = list(_edits(graph, base))
    if len(edits) > MAX_SCENARIOS:
        raise LimitError("too_many_scenarios", f"whatif would re-evaluate the program {len(edits)} times "
                         f"(once per live node and cut); the limit is {MAX_SCENARIOS}",
                         hint="try it on a smaller part of the program")
    rows = []
    for label, action, program, change in edits:
        edit: Edit = Edit(graph)
        change(edit)
        result, error = run_graph(edit.graph(), values, leaves, dtype, device)
        rows.append(_scenario(base, Scenario(label, action, program), result, error))
    return WhatIf(base, rows)


def whatif(source: str, /, *, wrt: str | list[str] | None = None, dtype: str = "float32",
           device: str = "cpu", seed: int = 0, values: dict[str, Any] | None = None, strict: bool = False,
           **kw_values: Any) -> WhatIf:
    """For every live node, the grads if it were detached; for every cut, the grads without it.

    Takes the same arguments as `explain()`. Raises GradflowError if the program
    as written cannot be evaluated. A value the program does not use is a warning (`.warnings`), or with
    `strict` an error.
    """
    from gradflow.engine.explain import unused_warnings

    given = merge_values(values, kw_values)
    graph, vals, leaves = prepare(source, given, wrt, dtype=dtype, seed=seed, strict=strict)
    result = whatif_graph(graph, vals, leaves, dtype=dtype, device=device)
    result.current.warnings[:0] = unused_warnings(given, graph.inputs)
    return result

