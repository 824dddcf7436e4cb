"""lark's parse tables for grammar.lark, shipped with the package: no cache file, nothing to unpickle.

Building the LALR tables from the grammar is a noticeable part of a command's start-up. Not lark's own cache: a
pickle under ~/.cache, where a poisoned file (a CI cache shared between jobs) would run code. The tables are
plain data in grammar_tables.json, generated from the grammar and checked by a test against it (lark loads them
only through a private name: gradflow/compat.py). If the grammar changed and the tables were not regenerated,
or this lark cannot read them, the parser builds them in memory (correct, just slower) and the test fails.

    python -m gradflow.language.tables      # regenerate grammar_tables.json after editing grammar.lark
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from gradflow.compat import lark_from_tables

if TYPE_CHECKING:
    from lark import Lark

HERE = os.path.dirname(__file__)
GRAMMAR = os.path.join(HERE, "grammar.lark")
TABLES = os.path.join(HERE, "grammar_tables.json")
OPTIONS: dict[str, Any] = {"parser": "lalr", "maybe_placeholders": True}


def grammar_text() -> str:
    with open(GRAMMAR, encoding="utf-8") as fh:  # not importlib.resources: its readers slow start-up
        return fh.read()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shipped() -> dict:
    """grammar_tables.json: {"grammar_sha256", "data", "memo"}, the last two frozen (see freeze)."""
    with open(TABLES, encoding="utf-8") as fh:
        return json.load(fh)


def load(postlex) -> Lark:
    """The parser: from the shipped tables when they match the grammar, else built from the grammar."""
    text = grammar_text()
    tables = shipped()
    fresh = tables["grammar_sha256"] == digest(text)
    return lark_from_tables((thaw(tables["data"]), thaw(tables["memo"])) if fresh else None, text, postlex,
                            **OPTIONS)


def generate(postlex) -> str:
    """grammar_tables.json's text: the tables (lark's own cache format, minus the pickle)."""
    from lark import Lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    text = grammar_text()
    data, memo = Lark(text, postlex=postlex, **OPTIONS).memo_serialize([TerminalDef, Rule])
    data["options"] = {k: v for k, v in data["options"].items() if k != "postlex"}  # an object, given at load
    return json.dumps({"grammar_sha256": digest(text), "data": freeze(data), "memo": freeze(memo)},
                      separators=(",", ":")) + "\n"


# Data, not a Python module of literals: json's C parser reads it at the same speed whether or not Python may
# write bytecode (PYTHONDONTWRITEBYTECODE, a read-only install, an editable one), where a module this size is
# compiled again by every process that cannot cache its bytecode. JSON has no tuples and only string keys, so
# containers are tagged lists.
def freeze(obj):
    """dicts, lists and tuples -> tagged lists ["d" | "l" | "t", items] (a dict's items as [key, value] pairs, so
    keys keep their type); other values as they are."""
    if isinstance(obj, dict):
        return ["d", [[freeze(k), freeze(v)] for k, v in obj.items()]]
    if isinstance(obj, (list, tuple)):
        return ["l" if isinstance(obj, list) else "t", [freeze(x) for x in obj]]
    return obj


def thaw(obj):
    """freeze()'s inverse."""
    if type(obj) is not list:
        return obj
    tag, items = obj
    if tag == "d":
        return {thaw(k): thaw(v) for k, v in items}
    thawed = [thaw(x) for x in items]
    return thawed if tag == "l" else tuple(thawed)


if __name__ == "__main__":
    from gradflow.language.lexing import Continuation

    with open(TABLES, "w", encoding="utf-8") as out:
        out.write(generate(Continuation()))
    print(f"wrote {TABLES}")
