"""Every private use of another library lives here, each in one function of its own.

Each one is pinned to the library versions it was checked with and to the names it needs, and has a fallback
through the library's public API when they are gone or the version differs: the same result, slower. Nothing
else in gradflow reaches into lark's, Typer's or rich's insides, and nothing here runs at import time: callers
decide when.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lark import Lark


def _version(text: str) -> tuple[int, ...]:
    """'1.3.1' -> (1, 3): major and minor, the part a change of insides would come with."""
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# ---- lark: the shipped parse tables and the fast parser's view of lark's insides -----------------------
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


# ---- Typer: coercion without pydantic ------------------------------------------------------------------
# Typer 0.2x builds a pydantic TypeAdapter for every parameter of the command being run, so a syntax error's
# start-up imported pydantic. Plain values (a str, a bool, digits for an int) need no pydantic: they pass
# through, and Typer's own coercion is built only for the others (it words every error).

TYPER_CHECKED = ((0, 29), (0, 30))  # the Typer versions this was checked with (from, up to but not including)

_NOT_PLAIN = object()


def _typer_internals() -> tuple[Any, Any] | None:
    """Typer's `core` and `_coercion` modules, if this Typer is one the patch was checked with and has the
    names it replaces; else None (Typer's own coercion stays)."""
    try:
        import typer
        from typer import _coercion, core
    except ImportError:
        return None
    low, high = TYPER_CHECKED
    if not low <= _version(getattr(typer, "__version__", "0")) < high:
        return None
    names = ("build_runtime_param", "RuntimeParam", "resolve_type_descriptor")
    if not all(hasattr(_coercion, name) for name in names) or not hasattr(core, "build_runtime_param"):
        return None
    return core, _coercion


def plain_value(annotation, value, info):
    """What Typer's coercion gives for a plain value: a str, bool, int or float of the annotation's type as it
    is, and a whole number written in digits (`--jobs 2`) within the option's min and max as that int. Anything
    else (a bad number, one out of range, other types): _NOT_PLAIN, and Typer's own coercion says what is wrong."""
    kind = type(value)
    if kind is annotation and kind in (str, bool, int, float):
        return value
    if annotation is int and kind is str and value.isascii() and value.isdigit():
        number = int(value)
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        if (low is None or number >= low) and (high is None or number <= high):
            return number
    return _NOT_PLAIN


def typer_coercion_without_pydantic() -> bool:
    """Replace Typer's coercion factory (once, for this process); False when it is not applied: already
    done, or a Typer without the names or outside TYPER_CHECKED (its own coercion then does all the work)."""
    internals = _typer_internals()
    if internals is None:
        return False
    core, coercion = internals
    original = core.build_runtime_param
    if getattr(original, "_gradflow", False):
        return False
    resolve, base = coercion.resolve_type_descriptor, coercion.RuntimeParam

    class LazyRuntimeParam(base):  # type: ignore[valid-type,misc]  # Typer's own class, found at run time
        def _coerce_value(self, value, param, ctx):
            plain = plain_value(self.annotation, value, self.parameter_info)
            if plain is not _NOT_PLAIN:
                return plain
            real = original(resolve(self.annotation, self.parameter_info))
            return real._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor):
        if descriptor.file_annotation is not None or getattr(descriptor.parameter_info, "parser", None):
            return original(descriptor)
        return LazyRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)

    build_runtime_param._gradflow = True  # type: ignore[attr-defined]
    core.build_runtime_param = build_runtime_param
    return True


def typer_coercion_applies() -> bool:
    """Would typer_coercion_without_pydantic() apply to this Typer (or has it)?"""
    return _typer_internals() is not None
