"""Text shown to people: control characters made visible.

User text reaches the screen in many ways (a comment in the program, a value, a file name, a parameter or module
name from `inspect`'s user code, an exception message) and a raw ESC, BEL or backspace in it would drive the
terminal (recolour it, clear it, hide text) or corrupt a DOT/Mermaid label. Every renderer passes what it prints
through `visible()`: such characters are shown as Python writes them in a string ('\\x1b', '\\r', '\\u202e').
Tabs and newlines stay (the renderers lay them out). DOT and Mermaid labels (render/graph.py, report/module_picture.py)
are escaped here too, in one place. The bottom layer: imports nothing, no torch.
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


def visible_width(text: str) -> int:
    """How many characters `text` takes once made visible."""
    return len(visible(text))


def dot_string(text: str) -> str:
    """A quoted Graphviz DOT string: control characters shown escaped, then DOT's escapes (\\\\, \\", \\n)."""
    return '"' + visible(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def mermaid_text(text: str) -> str:
    """Text inside a quoted Mermaid label: control characters shown escaped, then Mermaid's entities."""
    return visible(text).replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("\n", "<br/>")
