"""The rows `compare` shows: one per program (compare.py) or per cut mechanism (modes.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradflow.analysis.explanation import Explanation, Warning
from gradflow.display import Shown
from gradflow.errors import ExitCode, GradflowError, counts_as_failure, is_no_gradient
from gradflow.values.jsonable import dumps, one_document, to_jsonable


@dataclass
class Row:
    """One expression (or one mechanism) evaluated."""

    label: str  # the expression, or the mechanism's name
    program: str  # the program text that ran (for modes: as it would be written)
    grads: dict[str, Any] = field(default_factory=dict)  # leaf -> tensor | None
    output: Any = None
    error: GradflowError | None = None
    inner: dict[str, bool] = field(default_factory=dict)  # modes: node inside a cut -> requires_grad
    note: str = ""
    skipped: bool = False  # modes: the mechanism cannot express this program's cuts (not run)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def no_gradient(self) -> bool:
        """The program ran, and its answer is that no gradient reaches the leaves (not a failure)."""
        return self.error is not None and is_no_gradient(self.error.kind)

    def fill(self, result: Explanation):
        self.output, self.error = result.output.value, result.error
        self.grads.update(result.grads)
        return self

    def to_dict(self) -> dict:
        return {"label": self.label, "program": self.program, "ok": self.ok,
                "output": to_jsonable(self.output), "grads": {k: to_jsonable(v) for k, v in self.grads.items()},
                "inner_requires_grad": dict(self.inner), "note": self.note,
                "skipped": self.skipped,
                "error": None if self.error is None else self.error.to_dict()}


@dataclass(repr=False)  # repr(): the table as text (display.Shown)
class Comparison(Shown):
    rows: list[Row]
    leaves: list[str]  # every leaf shown (a column per leaf)
    modes: bool = False
    warnings: list[Warning] = field(default_factory=list)  # a value no program uses

    @property
    def exit_code(self) -> int:
        """0 if every row ran or got the answer "no gradient reaches the leaves"; else the first failing
        row's code if all failed, else PARTIAL (4).

        With modes, failing mechanisms are findings, not failures: always 0.
        """
        failed = [r for r in self.rows if r.error is not None and counts_as_failure(r.error.kind)]
        if self.modes or not failed:
            return int(ExitCode.OK)
        first = failed[0].error
        return int(first.exit_code if first is not None and len(failed) == len(self.rows) else ExitCode.PARTIAL)

    @one_document
    def to_dict(self) -> dict:
        return {"modes": self.modes, "leaves": list(self.leaves), "rows": [r.to_dict() for r in self.rows],
                "warnings": [w.to_dict() for w in self.warnings], "exit_code": self.exit_code}

    def to_json(self, **kw) -> str:
        return dumps(self.to_dict(), **kw)
