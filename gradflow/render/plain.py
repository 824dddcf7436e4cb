"""Errors found before evaluation, printed as plain text: no rich import on the early-exit path.

The text is exactly what render.print_error prints: control characters shown escaped ('\x1b', see
gradflow/display.py), tabs expanded as rich does; colour only when stderr is a terminal and NO_COLOR /
TERM=dumb say nothing.
"""
from __future__ import annotations

import os
import sys

from gradflow.display import visible
from gradflow.errors import GradflowError

_STYLE = {"error": "\x1b[1;31m", "hint": "\x1b[36m"}


def _colour() -> bool:
    stream = sys.stderr
    tty = getattr(stream, "isatty", lambda: False)()
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _line(text: str, style: str | None, colour: bool) -> str:
    text = visible(text).expandtabs(8)
    return f"{_STYLE[style]}{text}\x1b[0m" if colour and style else text


def print_error(error: GradflowError) -> None:
    """`error: ...`, the source line with a caret under the bad token, `hint: ...` (one line each)."""
    colour = _colour()
    lines = [_line(f"error: {error.message}", "error", colour)]
    caret = error.caret()
    if caret:
        lines.append(_line(caret, None, colour))
    if error.detail:
        lines.append(_line(error.detail, None, colour))
    if error.hint:
        lines.append(_line(f"hint: {error.hint}", "hint", colour))
    print("\n".join(lines), file=sys.stderr, flush=True)
