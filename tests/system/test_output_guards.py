"""Where output is made, checked on the package's source so a new command cannot slip past the guarantees:

- every rich Console is made by render/console.new_console (a sane width whatever COLUMNS says, control
  characters shown escaped), and the one progress bar by cli/common.progress_bar (it never takes stdout over);
- every file gradflow writes goes through cli/files.write_file (atomic: whole or not at all);
- every DOT / Mermaid label goes through display.dot_string / mermaid_text (control characters escaped).
"""
import ast
import functools
from pathlib import Path

import gradflow

PACKAGE = Path(gradflow.__file__).parent


@functools.cache  # parsed once per process: the tests only read the trees
def _sources():
    return tuple((str(path.relative_to(PACKAGE)), ast.parse(path.read_text()))
                 for path in sorted(PACKAGE.rglob("*.py")))


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _calls():
    for where, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                yield where, node


def test_consoles_and_progress_bars_are_made_in_one_place_each():
    made = {(where, _name(call)) for where, call in _calls() if _name(call) in ("Console", "Progress", "Live")}
    assert made == {("render/console.py", "Console"), ("cli/common.py", "Progress")}
    (bar,) = [call for where, call in _calls() if _name(call) == "Progress"]
    settings = {k.arg: k.value.value for k in bar.keywords if isinstance(k.value, ast.Constant)}
    assert settings["redirect_stdout"] is False and settings["redirect_stderr"] is False
    assert settings["transient"] is True


def _writes(call: ast.Call) -> bool:
    """open()/os.open()/Path.open() for writing, write_text/write_bytes, savefig to anything but a buffer."""
    name = _name(call)
    if name in ("write_text", "write_bytes"):
        return True
    if name == "savefig":
        return not (call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "buffer")
    if name == "open":
        texts = [a.value for a in [*call.args, *(k.value for k in call.keywords)] if isinstance(a, ast.Constant)]
        flags = ast.unparse(call)
        return any(isinstance(t, str) and set(t) & set("wax+") for t in texts) or "O_WRONLY" in flags \
            or "O_RDWR" in flags
    return False


def _to_devnull(call: ast.Call) -> bool:
    return bool(call.args) and ast.unparse(call.args[0]) == "os.devnull"


def test_every_file_written_goes_through_write_file():
    writers = {where for where, call in _calls() if _writes(call) and not _to_devnull(call)}
    # language/tables.py: the developer's `python -m gradflow.language.tables`, which writes the package's own
    # grammar_tables.json (never run by a command); render/views.py: the library's `result.draw(path)`, called by
    # the user's own code (a layer below cli/files.py)
    assert writers == {"cli/files.py", "language/tables.py", "render/views.py"}


def test_dot_and_mermaid_labels_are_escaped_in_one_place():
    for module in ("render/graph_text.py", "report/module_picture.py"):
        text = (PACKAGE / module).read_text()
        assert "dot_string(" in text and "mermaid_text(" in text
        assert ".replace('\"', '\\\\\"')" not in text and '"#quot;"' not in text, module  # no escaping of its own
