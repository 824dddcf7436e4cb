"""lark's parse tables, cached per user and keyed by a hash of the grammar: ~0.2 s less on every start
(the command line and the library alike; measured in bench/README.md).
"""
from __future__ import annotations

import os
import sys


def cache_file() -> str | None:
    """The cache file, in a directory only this user can use; None (build the tables in memory) if none."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "gradflow")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None  # no writable cache: build the tables every time
    return os.path.join(path, f"grammar-lark-py{sys.version_info[0]}{sys.version_info[1]}.cache")
