"""`inspect FILE.py:FUNCTION --arg NAME=VALUE`: FUNCTION's arguments, and what it may return.

A VALUE is read as a Python literal (`4`, `0.1`, `True`, `None`, `'a'`, `[1, 2]`, `{"k": 1}`) with
`ast.literal_eval`, and as a plain string when it is not one (`--arg path=data/train.txt`). Names are checked
against FUNCTION's signature once it is imported. Torch-free.
"""
from __future__ import annotations

import ast
import inspect

from gradflow.errors import ValueInputError

RESULT_KEYS = ("loss", "model", "params", "optimizer")


def parse_args(items: list[str]) -> dict[str, object]:
    """['batch_size=4', 'lr=0.1'] -> {'batch_size': 4, 'lr': 0.1} (a repeated NAME is an error)."""
    out: dict[str, object] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier():
            raise ValueInputError("usage", f"--arg expects NAME=VALUE, got '{item}'",
                                  hint="e.g. --arg batch_size=4 --arg lr=0.1 (VALUE is a Python literal, "
                                       "else a string)")
        if name in out:
            raise ValueInputError("usage", f"--arg {name} is given twice", hint="give each argument once")
        out[name] = literal(text)
    return out


def literal(text: str) -> object:
    """A Python literal, else the text itself."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _signature_text(sig) -> str:
    return str(sig.replace(return_annotation=sig.empty))[1:-1] or "none"


def check_call(func, name: str, kwargs: dict[str, object]) -> None:
    """The arguments fit FUNCTION's signature; otherwise say which ones it takes (exit 2)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin without a signature: let the call itself tell
        return
    params = sig.parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    named = {k: p for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = [k for k in kwargs if k not in named and not takes_any]
    if unknown:
        raise ValueInputError("unknown_arg", f"{name}() has no parameter '{unknown[0]}'",
                              hint=f"its parameters: {_signature_text(sig)}")
    missing = [p for p in params.values() if p.default is p.empty and p.name not in kwargs
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        first = missing[0]
        if first.kind is first.POSITIONAL_ONLY:
            raise ValueInputError("usage", f"{name}() needs the positional-only argument '{first.name}', which "
                                  "--arg cannot give", hint="wrap it: def main(): return step(...)")
        raise ValueInputError("usage", f"{name}() needs a value for '{first.name}'",
                              hint=f"give it with --arg {first.name}=VALUE (its parameters: "
                                   f"{_signature_text(sig)}), or wrap it: def main(): return "
                                   f"{name}(...)")


def unpack(value) -> tuple[object, object, object]:
    """What FUNCTION returned -> (loss, model or {name: tensor} or None, optimizer or None).

    A loss; (loss, model); (loss, model, optimizer); or a dict with "loss" and any of "model" (or "params")
    and "optimizer".
    """
    if isinstance(value, tuple) and len(value) in (2, 3):
        return value[0], value[1], value[2] if len(value) == 3 else None
    if type(value) is not dict and not isinstance(value, tuple) and not _is_tensor(value):
        loss = _loss_of(value)  # a transformers ModelOutput (`return model(**batch)`), or any object with .loss
        if loss is not None:
            return loss, None, None
    if isinstance(value, dict) and "loss" in value:
        odd = [k for k in value if k not in RESULT_KEYS]
        if odd:
            raise ValueInputError("bad_result", f"the dict FUNCTION returned has an unknown key '{odd[0]}'",
                                  hint="its keys: " + ", ".join(RESULT_KEYS))
        return value["loss"], value.get("model", value.get("params")), value.get("optimizer")
    return value, None, None


def _is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and type(value).__name__ in ("Tensor", "Parameter")


def _loss_of(value):
    """value.loss when it has one (None otherwise): what a Hugging Face model returns when given labels."""
    try:
        loss = getattr(value, "loss", _MISSING)
    except Exception as err:  # noqa: BLE001  # the user's object: its attribute raised
        raise ValueInputError("bad_result", f"FUNCTION returned a {type(value).__name__} whose .loss raised "
                              f"{type(err).__name__}", hint="return the loss tensor itself") from None
    if loss is None:
        raise ValueInputError("bad_result", f"FUNCTION returned a {type(value).__name__} whose .loss is None "
                              "(a Hugging Face model computes its loss only when it is given labels)",
                              hint="return model(**batch, labels=labels), or compute and return the loss")
    return None if loss is _MISSING else loss


_MISSING = object()

