"""Start-up: keep Typer from importing pydantic when no option value needs it.

Typer 0.2x builds a pydantic TypeAdapter for every parameter of the command
being run, even those left at their default, so `gradflow eval "x+"` paid
~0.13 s (a third of its start-up) to import pydantic. Here every parameter gets
a lazy coercion: strings and booleans from the command line pass through as they
are, as do defaults already of their type (`--runs: int = 3`); any other value
(a --file path, a --var list, "3" for an int) builds Typer's own coercion on
first use. A Typer without these internals (older or newer) is left untouched.
"""
from __future__ import annotations


def install() -> bool:
    """Patch Typer's coercion factory once; False when this Typer has no such internals."""
    try:
        from typer import _coercion, core

        original, base = core.build_runtime_param, _coercion.RuntimeParam
        resolve = _coercion.resolve_type_descriptor
    except (ImportError, AttributeError):
        return False
    if getattr(original, "_gradflow", False):
        return False

    class LazyRuntimeParam(base):
        def _coerce_value(self, value, param, ctx):
            if self.annotation in (str, bool, int, float) and type(value) is self.annotation:
                return value
            real = original(resolve(self.annotation, self.parameter_info))
            return real._coerce_value(value, param=param, ctx=ctx)

    def build_runtime_param(descriptor):
        if descriptor.file_annotation is not None or getattr(descriptor.parameter_info, "parser", None):
            return original(descriptor)
        return LazyRuntimeParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)

    build_runtime_param._gradflow = True
    core.build_runtime_param = build_runtime_param
    return True
