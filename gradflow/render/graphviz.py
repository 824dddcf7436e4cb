"""DOT text -> SVG / PNG / PDF through Graphviz's own `dot` program (a layout nobody should rewrite).

Used by `gradflow graph`, `inspect --graph svg|png`, the results' `draw()` and notebook pictures, and the
HTML report. Graphviz is a system package (`apt-get install graphviz`), so every caller has a plain-text way
out when `dot` is missing: `available()` says whether it is there.
"""
from __future__ import annotations

import shutil
import subprocess

from gradflow.errors import GradflowError

GRAPHVIZ_SECONDS = 60  # Graphviz can take minutes on a big graph: give up with a message instead


def available() -> bool:
    """Is Graphviz's `dot` on PATH?"""
    return shutil.which("dot") is not None


def graphviz(dot_text: str, fmt: str, asked: str | None = None) -> bytes:
    """Render DOT through the Graphviz `dot` program (svg, png, pdf). `asked`: what the user asked for, as the
    error names it (`--format svg` by default)."""
    asked = asked or f"--format {fmt}"
    exe = shutil.which("dot")
    if exe is None:
        raise GradflowError("graphviz_missing", f"{asked} needs Graphviz's `dot` program, which is not "
                            "installed (not on PATH)",
                            hint="install Graphviz (Debian/Ubuntu: sudo apt-get install graphviz; macOS: brew "
                                 "install graphviz), or use --format dot / mermaid / tree, which need nothing")
    try:
        done = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True,
                              timeout=GRAPHVIZ_SECONDS)
    except subprocess.TimeoutExpired:  # run() has killed it
        raise GradflowError("graphviz_timeout", f"Graphviz's dot -T{fmt} did not finish in {GRAPHVIZ_SECONDS} s, "
                            "so it was stopped",
                            hint="write the DOT text instead (--format dot -o graph.dot) and render it yourself, "
                                 "or use --format mermaid / tree") from None
    except OSError as err:
        raise GradflowError("graphviz_failed", f"cannot run {exe}: {err.strerror or err}") from None
    if done.returncode != 0:
        raise GradflowError("graphviz_failed", f"dot -T{fmt} failed: {done.stderr.decode(errors='replace')[:300]}")
    return done.stdout
