"""What runs right after the engine first imports torch. Torch-free.

The library registers nothing: a user's process is left as it is. The command line registers its
garbage-collector freeze here (cli/startup.py), so the engine never imports process plumbing.
"""
from __future__ import annotations

from collections.abc import Callable

AFTER_TORCH_IMPORT: list[Callable[[], None]] = []


def torch_imported() -> None:
    for callback in AFTER_TORCH_IMPORT:
        callback()
