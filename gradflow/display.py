"""Text shown to people: control characters made visible.

User text reaches the screen in many ways (a comment in the program, a value, a file name, a parameter or module
name from `inspect`'s user code, an exception message) and a raw ESC, BEL or backspace in it would drive the
terminal (recolour it, clear it, hide text) or corrupt a DOT/Mermaid label. Every renderer passes what it prints
through `visible()`: such characters are shown as Python writes them in a string ('\\x1b', '\\r', '\\u202e').
Tabs and newlines stay (the renderers lay them out). DOT and Mermaid labels (render/graph_text.py,
report/module_picture.py) are escaped here too, in one place. The bottom layer: imports nothing, no torch.
"""
from __future__ import annotations

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides/isolates (which can make
# text read differently from what it is: "Trojan Source", CVE-2021-42574)
_CONTROL = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F),
            *range(0x2066, 0x206A)]
_SHOWN = {c: repr(chr(c))[1:-1] for c in _CONTROL}


def visible(text: str) -> str:
    """`text` with every control character (but tab and newline) written as an escape: '\\x1b[31m' for ESC[31m."""
    return text.translate(_SHOWN)


def fit_name(name: str, width: int) -> str:
    """A dotted name in at most `width` characters without breaking a word: the front left out, the last parts
    kept (`…layers.0.self_attn.q_proj.lora_A.default.weight`), as many as fit. Only a last part longer than
    `width` itself is cut, keeping its end."""
    if len(name) <= width:
        return name
    parts = name.split(".")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        if 1 + len(part) + 1 + len(kept) > width:
            break
        kept = f"{part}.{kept}"
    return "…" + kept[-(width - 1):]


def dot_string(text: str) -> str:
    """A quoted Graphviz DOT string: control characters shown escaped, then DOT's escapes (\\\\, \\", \\n)."""
    return '"' + visible(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def mermaid_text(text: str) -> str:
    """Text inside a quoted Mermaid label: control characters shown escaped, then Mermaid's entities."""
    return visible(text).replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("\n", "<br/>")


# ---- results that show themselves ---------------------------------------------------------------------------
# A result prints as its terminal table (print, the REPL) and shows the same table in colour in Jupyter
# (IPython's display protocol: _repr_html_, _repr_mimebundle_). Drawing is the job of gradflow.render, a layer
# above every result, so a result does not import it: its class names its view in VIEWS below, and the
# renderers are imported by name when the result is first shown (the one place a lower layer reaches up, as
# IPython's own formatters reach every object's _repr_*_ methods).

VIEWS = "gradflow.render.views"  # the module that knows how to draw every result (render/views.py)


def _views():
    import importlib

    return importlib.import_module(VIEWS)


class Shown:
    """Mixin: `str()`/`repr()` the terminal table as text, Jupyter the same table in HTML with its colours."""

    __slots__ = ()

    def __str__(self) -> str:
        return _views().text(self)

    def __repr__(self) -> str:
        return _views().short_text(self)

    def _repr_html_(self) -> str:
        return _views().html(self)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return _views().mimebundle(self)


class Drawn(Shown):
    """A result with a graph: also `to_dot()`, `to_mermaid()`, `draw(path)`, and its picture (SVG when Graphviz's
    `dot` is installed) beside its table in Jupyter."""

    __slots__ = ()

    def to_dot(self) -> str:
        """The graph as Graphviz DOT text."""
        return _views().dot(self)

    def to_mermaid(self) -> str:
        """The graph as Mermaid text (GitHub and many Markdown viewers draw it)."""
        return _views().mermaid(self)

    def draw(self, path):
        """Write the graph to `path`, in the format its suffix names: .svg, .png, .pdf (Graphviz's `dot`),
        .dot / .gv (DOT text), .mmd (Mermaid text). Returns the path."""
        return _views().draw(self, path)
