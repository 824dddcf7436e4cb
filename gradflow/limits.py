"""Resource limits: named defaults, the active set, and one check function.

Every limit can be changed per call (`explain(..., limits={"depth": 500})`,
`gradflow eval ... --limit depth=500`). Code that allocates (the engine, tensor
constructors) calls `check_elements()` BEFORE allocating; it reads the limits of
the evaluation in progress. Torch-free.
"""
from __future__ import annotations

import contextvars
from typing import NamedTuple

from gradflow.errors import LimitError, Span

MAX_LENGTH = 10_000  # characters of program text
MAX_DEPTH = 500  # nesting levels of the expression tree (parentheses, calls, operator chains)
# nodes in the lowered graph. Names are short (language/graph.py: NAME_WIDTH), so cost grows linearly with the
# nodes (bench/program_size.py measures it). A graph is also a chain as deep
# as its nodes (x+x+...+x, or a1 = x*1; a2 = a1*1; ...): eval of a chain of 40,000 worked, one of 80,000
# crashed (SIGSEGV, the C stack; docs/limits.md); the default keeps twice that margin.
MAX_NODES = 20_000
MAX_ELEMENTS = 50_000_000  # elements in any one tensor (a value, a result, a constructor): 200 MB as float32
MAX_TOTAL_ELEMENTS = 200_000_000  # elements over all values of one evaluation: 0.8 GB as float32
# bytes of one batch input line: a program (MAX_LENGTH characters, up to 6 bytes each escaped in JSON) and its values
MAX_LINE = 1_000_000
MAX_VALUE_DIMS = 32  # nesting of a JSON list value ([[[...]]])
MAX_JSON_DEPTH = 64  # [ and { in one batch line: a record, its "vars", a value of MAX_VALUE_DIMS, and room to spare
LINE_SKIP_FACTOR = 100  # the rest of an over-long batch line is skipped up to 100 x the line limit, then reading stops
PARSE_CACHE_BYTES = 64 * 2**20  # compiled programs kept for reuse (language/compile.py), by their estimated size
JSON_FULL_MAX = 1000  # --json --summary: tensors with more elements become summary objects
# tensor elements one JSON document (a --json output, a batch or sweep record) prints in full: ~200 MB of text
MAX_JSON_ELEMENTS = 10_000_000


class Limits(NamedTuple):  # a NamedTuple, not a dataclass: keeps dataclasses off the start-up path
    length: int = MAX_LENGTH
    depth: int = MAX_DEPTH
    nodes: int = MAX_NODES
    elements: int = MAX_ELEMENTS
    total: int = MAX_TOTAL_ELEMENTS
    line: int = MAX_LINE
    json: int = MAX_JSON_ELEMENTS


DEFAULT = Limits()
NAMES = Limits._fields
_CURRENT: contextvars.ContextVar[Limits] = contextvars.ContextVar("gradflow_limits", default=DEFAULT)


def as_limits(given) -> Limits:
    """None (the limits in force), a Limits, a {name: int} dict, or CLI items ["depth=500", ...] -> Limits."""
    if given is None or isinstance(given, Limits):
        return given or current()
    items = given.items() if isinstance(given, dict) else [_split(str(s)) for s in given]
    changes = {}
    for name, value in items:
        key = str(name).replace("-", "_").removeprefix("max_")
        key = "total" if key == "total_elements" else key
        if key not in NAMES:
            raise LimitError("bad_limit", f"unknown limit '{name}'", hint="limits: " + ", ".join(NAMES))
        if key in changes:
            raise LimitError("bad_limit", f"limit '{key}' is given twice", hint="give each limit once")
        changes[key] = _count(name, value)
    return DEFAULT._replace(**changes)


def _split(item: str):
    name, eq, value = item.partition("=")
    if not eq:
        raise LimitError("bad_limit", f"--limit takes NAME=N, got '{item}'", hint="--limit depth=500")
    return name.strip(), value.strip()


def _count(name, value) -> int:
    """A positive whole number: 500, "500", "1e7" (a whole number in exponent form); never 1.9 or "1.9"."""
    try:
        f = float(value) if isinstance(value, str) else value
        n = int(f)
        if n != f:  # 1.9 would silently become 1
            n = -1
    except (TypeError, ValueError, OverflowError):
        n = -1
    if isinstance(value, bool) or n < 1:
        raise LimitError("bad_limit", f"limit '{name}' must be a positive whole number, got {value!r}",
                         hint=f"e.g. {name}=500 or {name}=1e7")
    return n


def current() -> Limits:
    """The limits of the evaluation in progress (defaults outside one)."""
    return _CURRENT.get()


class using:  # noqa: N801 - used as `with using(limits):`, like contextlib's context managers
    """These limits in force inside the block (it gives them back). A class, not a generator: every evaluation
    (every batch line) enters it several times."""

    __slots__ = ("limits", "token")

    def __init__(self, limits: Limits):
        self.limits = limits

    def __enter__(self) -> Limits:
        self.token = _CURRENT.set(self.limits)
        return self.limits

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self.token)


_UNITS = {"length": "characters", "depth": "levels", "nodes": "nodes", "elements": "elements",
          "total": "elements in total", "line": "bytes", "json": "tensor elements"}


def check(name: str, amount: int, what: str, *, limit: int | None = None,
          span: Span | None = None, source: str | None = None):
    """Raise LimitError when `amount` exceeds limit `name` (default: the current one).

    `what` starts the message: "the program text has" -> "... has 12,000 characters; the limit is 10,000".
    """
    limit = current()._asdict()[name] if limit is None else limit
    if amount > limit:
        raise LimitError(f"limit_{name}", f"{what} {amount:,} {_UNITS[name]}; the limit is {limit:,}",
                         hint=_raise_hint(name, max(amount, limit * 10)), span=span, source=source)


def _raise_hint(name: str, bigger: int) -> str:
    return f"raise it with --limit {name}={bigger} (in Python: limits={{'{name}': {bigger}}})"


def too_long(name: str, what: str, *, limit: int | None = None) -> LimitError:
    """The error for an input read only up to its limit: "{what} more than 10,000 characters; the limit is ..."."""
    limit = current()._asdict()[name] if limit is None else limit
    return LimitError(f"limit_{name}", f"{what} more than {limit:,} {_UNITS[name]}; the limit is {limit:,}",
                      hint=_raise_hint(name, limit * 10))


def check_elements(count: int, what: str = "the tensor would have", **where):
    """Refuse a tensor of `count` elements before it is allocated."""
    check("elements", count, what, **where)
MAX_SWEEP_POINTS = 100_000  # points in one START:STOP:COUNT sweep
