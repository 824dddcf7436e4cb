"""Every start-up trick of the command, in one place, each with the figure that justifies it (bench/README.md).

1. Garbage collection (`begin`, `finish`, `in_command`, `before_exit`):
   - start-up builds only long-lived objects (Typer, click): the collector is off while they are built (~5 ms)
     and they are frozen out of its reach afterwards;
   - torch's ~10^6 objects live as long as the process: frozen right after the engine imports torch (a full
     collection over them costs ~0.1 s, and a cold eval triggers one);
   - everything is frozen once more before exit, so the interpreter's shutdown collections skip it (~0.4 s
     less per command that used torch).
   Only the command does this; the library leaves a user's process alone.
2. Typer's coercion (`_lazy_typer_coercion`): Typer 0.2x builds a pydantic TypeAdapter for every parameter
   of the command being run, so `gradflow eval "x+"` paid ~0.13 s (a third of its start-up) to import pydantic.
   - one evaluation pauses the collector until its output is printed (`pause_collector`).
3. lark is never imported at start-up, only on the first parse; its parse tables ship with the package
   (language/tables.py) and it is imported with the optional `regex` package hidden (language/larklib.py,
   6-12 ms): the library gets both too, so they live in language/.
4. A run builds only the command it runs (cli/app.py `make_app`): the other commands' modules are not imported
   and Typer does not read their signatures (~10 ms for the seven others).
"""
from __future__ import annotations

import gc

_GC_WAS_ON = gc.isenabled()


def begin() -> None:
    """Before the command's modules are imported."""
    gc.disable()


def finish() -> None:
    """After the command's modules are imported (and the app built)."""
    _lazy_typer_coercion()
    gc.freeze()  # what start-up built lives as long as the process: later GC passes skip it
    if _GC_WAS_ON:
        gc.enable()


def in_command() -> None:
    """gradflow runs as the `gradflow` command (not as a library in someone's process)."""
    from gradflow.engine.hooks import AFTER_TORCH_IMPORT

    AFTER_TORCH_IMPORT.append(gc.freeze)


def before_exit() -> None:
    gc.freeze()


def pause_collector() -> None:
    """One evaluation, from parsing to its printed output: its graph, tensors and results live until then, and
    every collection while they pile up walked them all again (a 19,200-node program spent 0.7 s of 3.5 s
    in the collector; bench/README.md, "Program size"). What the evaluation makes is still freed by reference
    counting as it goes; only cycles wait for `resume_collector()` (many evaluations, a sweep, resume first)."""
    gc.disable()


def resume_collector() -> None:
    if _GC_WAS_ON:
        gc.enable()


_NOT_PLAIN = object()


def _plain(annotation, value, info):
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


def _lazy_typer_coercion() -> bool:
    """Patch Typer's coercion factory once; False when this Typer has no such internals."""
    try:
        from typer import _coercion, core

        original, base = core.build_runtime_param, _coercion.RuntimeParam
        resolve = _coercion.resolve_type_descriptor
    except (ImportError, AttributeError):
        return False
    if getattr(original, "_gradflow", False):
        return False

    class LazyRuntimeParam(base):  # type: ignore[valid-type,misc]  # Typer's own class, found at run time
        def _coerce_value(self, value, param, ctx):
            plain = _plain(self.annotation, value, self.parameter_info)
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
