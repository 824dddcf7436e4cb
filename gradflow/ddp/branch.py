"""Source lines for the report: the branch (`if`, `while`, `for`, `x if c else y`) around a line that ran on some
ranks only, and the line that defines a module attribute (`self.aux = nn.Linear(...)`). Pure `ast`, no torch."""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_BRANCHES = (ast.If, ast.While, ast.For, ast.AsyncFor, ast.IfExp, ast.Try, ast.Match)


@dataclass(frozen=True)
class Branch:
    line: str  # file:line of the branch's test
    code: str  # that line's text, stripped

    def to_dict(self) -> dict:
        return {"line": self.line, "code": self.code}


@functools.lru_cache(maxsize=64)
def _parsed(path: str) -> tuple[ast.Module, tuple[str, ...]] | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
        return ast.parse(text), tuple(text.splitlines())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None  # a file this rank cannot read (another machine's path): no line to show


def split_line(where: str) -> tuple[str, int] | None:
    path, _, num = where.rpartition(":")
    return (path, int(num)) if path and num.isdigit() else None


def _body_lines(node: ast.AST) -> tuple[int, int]:
    """The lines a branch decides about: its body and else (not its own test)."""
    parts = [n for name, value in ast.iter_fields(node) if name in ("body", "orelse", "handlers", "finalbody", "cases")
             for n in (value if isinstance(value, list) else [value])]
    if isinstance(node, ast.IfExp):
        parts = [node.body, node.orelse]
    if not parts:
        return (0, -1)
    return min(p.lineno for p in parts), max(getattr(p, "end_lineno", p.lineno) or p.lineno for p in parts)


def enclosing_branch(where: str) -> Branch | None:
    """The innermost branch whose body holds the line `file:line`; None if there is none or the file is unreadable."""
    at = split_line(where)
    parsed = _parsed(at[0]) if at else None
    if at is None or parsed is None:
        return None
    tree, lines = parsed
    best: Any = None
    for node in ast.walk(tree):
        if isinstance(node, _BRANCHES):
            lo, hi = _body_lines(node)
            if lo <= at[1] <= hi and (best is None or node.lineno >= best.lineno):
                best = node
    if best is None:
        return None
    return Branch(f"{at[0]}:{best.lineno}", _header(best, lines))


def _header(node: Any, lines: tuple[str, ...]) -> str:
    """`if rank == 0:` — the branch's first line without its comment."""
    text = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
    test = getattr(node, "test", None) or getattr(node, "iter", None)
    if test is not None and not isinstance(node, ast.IfExp) and test.end_lineno == node.lineno:
        return (text[:test.end_col_offset] + ":").strip()
    return text.split("  #")[0].strip()


def definition_line(path: str, attribute: str) -> str | None:
    """`file:line` of the first `self.<attribute> = ...` in the file, if any."""
    parsed = _parsed(path)
    if parsed is None:
        return None
    for node in ast.walk(parsed[0]):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == attribute and isinstance(t.value, ast.Name) \
                        and t.value.id == "self":
                    return f"{path}:{node.lineno}"
    return None
