"""The package's own exceptions and the exit codes the CLI maps them to.

Torch-free: imported by the parser and the CLI before torch is loaded.
"""
from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from gradflow.display import visible


class ExitCode(IntEnum):
    """Exit codes of the `gradflow` command (documented in docs/exit-codes.md)."""

    OK = 0
    INTERNAL = 1  # a bug in gradflow: please report it with --debug output
    INPUT = 2  # the program, a value or an option is wrong
    NO_GRADIENT = 3  # the output does not require grad: nothing can flow back
    PARTIAL = 4  # batch: at least one record failed (the others were written); compare: some programs failed;
    #              inspect: some parameters could not be traced (status "untraced"; the rest of the report stands)
    USER_CODE = 5  # inspect: the user's own code failed (raised, called sys.exit, or its backward failed)
    GATE = 6  # inspect / ddp --fail-on: some parameter fell in a class the user asked to fail on
    DISTRIBUTED = 7  # ddp: a rank died, hung or timed out (the other ranks were stopped)
    INTERRUPTED = 130  # Ctrl-C


def text_of(err: BaseException) -> str:
    """str(err), for an exception raised by someone else's code: its own __str__ may raise too, and that must
    not turn their failure into one of gradflow's."""
    try:
        return str(err)
    except Exception as failed:  # noqa: BLE001 - whatever their __str__ raises
        return f"<its message cannot be shown: str() raised {type(failed).__name__}>"


class Span(NamedTuple):  # a NamedTuple, not a dataclass: keeps dataclasses off the start-up path
    """A half-open character range [start, end) in the program text."""

    start: int
    end: int


class GradflowError(Exception):
    """Base class: every error gradflow raises on purpose.

    `kind` is a stable machine-readable name (also the JSON `error.kind`),
    `message` says what is wrong, `hint` how to fix it, `span` where.
    """

    exit_code = ExitCode.INPUT
    detail: str | None = None  # more lines to show between the message and the hint (a traceback)
    backward_failure: dict | None = None  # why the user's backward failed, when gradflow explains it
    #                                       (tracer/failures.py; its JSON)

    def __init__(self, kind: str, message: str, *, hint: str | None = None,
                 span: Span | None = None, source: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint
        self.span = span
        self.source = source

    @property
    def position(self) -> int | None:
        """0-based character offset of the error in the program text, when known."""
        return None if self.span is None else self.span.start

    def to_dict(self) -> dict:
        d: dict[str, object] = {"kind": self.kind, "message": self.message, "hint": self.hint}
        if self.span is not None:
            d["position"] = self.span.start
        if self.backward_failure is not None:
            d["backward_failure"] = self.backward_failure
        return d

    def caret(self) -> str | None:
        """The source line holding the error with a caret under the position."""
        if self.span is None or self.source is None:
            return None
        start = min(self.span.start, len(self.source))
        line_start = self.source.rfind("\n", 0, start) + 1
        line_end = self.source.find("\n", start)
        line = self.source[line_start: len(self.source) if line_end < 0 else line_end]
        col, end = start - line_start, max(start + 1, min(self.span.end, line_start + len(line))) - line_start
        # control characters are shown escaped ('\x1b'): the caret goes under what is shown
        pad, width = len(visible(line[:col])), max(1, len(visible(line[col:end])))
        return f"  {visible(line)}\n  {' ' * pad}{'^' * width}"

    def __str__(self) -> str:
        parts = [self.message, *([self.detail] if self.detail else [])]
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


class ParseError(GradflowError):
    """The program text is not valid gradflow (syntax, unknown name, arity)."""


class ValueInputError(GradflowError):
    """A variable's value is missing or cannot be read."""


class EvalError(GradflowError):
    """Evaluating the program in torch failed (shapes, flags, devices)."""


class LimitError(GradflowError):
    """An input exceeds one of gradflow's resource limits."""


class NoGradientError(GradflowError):
    """The output does not require grad, so backward cannot run (exit 3)."""

    exit_code = ExitCode.NO_GRADIENT


def is_no_gradient(kind: str | None) -> bool:
    """An error of this kind is the answer "no gradient reaches the leaves", not a failure of the input."""
    return kind == "no_gradient"


def counts_as_failure(kind: str | None) -> bool:
    """Whether a result with an error of this kind (None: no error) has failed: batch, compare and whatif count
    "no gradient" as an answer (their exit 4 counts input errors); eval exits 3 for it, like grep's 1."""
    return kind is not None and not is_no_gradient(kind)


class UntracedError(GradflowError):
    """Some parameters could not be traced (inspect): the report stands for the others (exit 4)."""

    exit_code = ExitCode.PARTIAL


class DistributedError(GradflowError):
    """`gradflow ddp`: a rank died, hung or timed out; the other ranks were stopped (exit 7)."""

    exit_code = ExitCode.DISTRIBUTED


class UserCodeError(GradflowError):
    """The user's own code failed while gradflow ran it (`inspect`): exit 5.

    `frames` are the traceback's frames in the user's code, plus the line that raised:
    (file, line, function, source text).
    """

    exit_code = ExitCode.USER_CODE

    def __init__(self, kind: str, message: str, *, hint: str | None = None,
                 frames: list[tuple[str, int, str, str]] | None = None):
        super().__init__(kind, message, hint=hint)
        self.frames = frames or []
        if self.frames:
            lines = [f'  File "{f}", line {n}, in {fn}' + (f"\n    {code}" if code else "")
                     for f, n, fn, code in self.frames]
            self.detail = "Traceback (your code; --debug shows all of it):\n" + "\n".join(lines)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["traceback"] = [{"file": f, "line": n, "function": fn, "code": code} for f, n, fn, code in self.frames]
        return d
