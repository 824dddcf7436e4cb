"""lark, imported with the optional `regex` package hidden: every lark name gradflow uses comes from here.

lark imports `regex` at start-up when it is installed (transformers and many other packages pull it in), which
costs 6-12 ms of every command's start-up, although gradflow never needs it: lark lexes with `re` unless a
grammar asks for `regex=True`, and gradflow loads its shipped parse tables rather than building them. So lark is
imported here with `regex` hidden for the duration of that import only; a later `import regex` (the user's
code, a tokenizer) finds the real package as usual. If lark or regex is already imported, nothing is hidden.
"""
from __future__ import annotations

import sys


def _import_lark_without_regex() -> None:
    if "lark" in sys.modules or "regex" in sys.modules:
        return
    sys.modules["regex"] = None  # type: ignore[assignment]  # `import regex` raises ImportError meanwhile
    try:
        import lark.lark  # noqa: F401  # lark.utils and lark.lark try `import regex` at import time
    finally:
        if sys.modules.get("regex", 0) is None:
            del sys.modules["regex"]


_import_lark_without_regex()

from lark import Lark, Token  # noqa: E402
from lark.exceptions import (  # noqa: E402
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)
from lark.lark import _LOAD_ALLOWED_OPTIONS, PostLex  # noqa: E402
from lark.lexer import UnlessCallback  # noqa: E402
from lark.parse_tree_builder import ExpandSingleChild  # noqa: E402
from lark.visitors import Transformer_NonRecursive  # noqa: E402

__all__ = ["ExpandSingleChild", "Lark", "Token", "PostLex", "Transformer_NonRecursive", "UnexpectedCharacters",
           "UnexpectedEOF", "UnexpectedInput", "UnexpectedToken", "UnlessCallback", "VisitError",
           "_LOAD_ALLOWED_OPTIONS"]
