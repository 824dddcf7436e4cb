"""Every private use of another library lives here.

Each one is checked against the library's version and the names it needs, and has a fallback that works
when they are gone: the public way, slower. Nothing here runs at import time; callers decide when.
"""
from __future__ import annotations

from typing import Any

# ---- Typer: coercion without pydantic ------------------------------------------------------------------
# Typer 0.2x builds a pydantic TypeAdapter for every parameter of the command being run, so a syntax error's
# start-up imported pydantic. Plain values (a str, a bool, digits for an int) need no pydantic: they pass
# through, and Typer's own coercion is built only for the others (it words every error).

TYPER_CHECKED = ((0, 29), (0, 30))  # the Typer versions this was checked with (from, up to but not including)

_NOT_PLAIN = object()


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


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
