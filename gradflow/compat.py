"""Every use of another library's private names, each in one function of its own: pinned to the versions it is
known to work with, and with a fallback through the library's public API when the name is gone or the version
differs. Nothing else in gradflow reaches into lark's, Typer's or rich's insides.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lark import Lark

# lark versions whose private `Lark._load_from_dict` reads the tables `Lark.memo_serialize` wrote (lark's own
# cache format): the format is lark's business and may change in any release.
LARK_TABLE_VERSIONS = ((1, 2), (1, 3))


def lark_from_tables(tables: tuple[dict, dict] | None, grammar: str, postlex: Any, **options: Any) -> Lark:
    """lark's parser for `grammar`: loaded from `tables` (the `(data, memo)` that lark's `memo_serialize` gave
    for this grammar and `options`) on a lark known to read them, else built from the grammar text: the same
    parser, built in each process instead of loaded."""
    import lark

    load = getattr(lark.Lark, "_load_from_dict", None)
    if tables is not None and load is not None and _version(lark.__version__) in LARK_TABLE_VERSIONS:
        try:
            return load(*tables, postlex=postlex)
        except (AttributeError, KeyError, TypeError, ValueError):  # tables this lark reads otherwise after all
            pass
    return lark.Lark(grammar, postlex=postlex, **options)


def _version(text: str) -> tuple[int, ...]:
    """'1.3.1' -> (1, 3): major and minor, the part a format change would come with."""
    try:
        return tuple(int(part) for part in text.split(".")[:2])
    except ValueError:
        return ()


# lark versions whose insides language/fastparse.py reads (its parse table, its lexers, its callbacks).
LARK_INSIDES_VERSIONS = ((1, 3),)


def lark_rule_callbacks(parser: Lark, transformer: Any) -> dict:
    """What lark's LALR parser calls when it reduces by each rule, with `transformer`'s methods (as the
    `transformer=` option builds them), through lark's private `Lark._parse_tree_builder`. On another lark, or
    without the name: TypeError, and language/parser.py keeps to lark's own parser."""
    builder = getattr(parser, "_parse_tree_builder", None)
    if builder is None or not _insides_known():
        raise TypeError("lark's rule callbacks are not where this lark version keeps them")
    return builder.create_callback(transformer)


def lark_scanner_patterns(scanner: Any) -> list:
    """The compiled regular expressions of one of lark's lexers (every terminal a named group, in lark's order),
    through lark's private `Scanner._mres`. On another lark, or without the name: TypeError, as above."""
    patterns = getattr(scanner, "_mres", None)
    if patterns is None or not _insides_known():
        raise TypeError("lark's lexer patterns are not where this lark version keeps them")
    return list(patterns)


def _insides_known() -> bool:
    import lark

    return _version(lark.__version__) in LARK_INSIDES_VERSIONS
