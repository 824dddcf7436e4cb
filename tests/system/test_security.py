"""No code execution from user text: the package never eval/exec/compiles text, and names are plain."""
import ast
import functools
from pathlib import Path

import pytest

import gradflow
from gradflow import ParseError, ValueInputError, explain, parse

PACKAGE = Path(gradflow.__file__).parent
BANNED_CALLS = {"eval", "exec", "compile", "__import__", "breakpoint"}
BANNED_MODULES = {"pickle", "marshal", "shelve", "dill", "cloudpickle"}
SHELL_CALLS = {"system", "popen", "execv", "execvp", "spawnl"}  # os.*: a command line through a shell
DYNAMIC_ATTR = {"getattr", "setattr", "delattr"}
# The only dynamic attribute access with a non-literal name, and why it is safe:
ALLOWED = {
    ("__init__.py", "getattr"),  # PEP 562 __getattr__: name checked against the fixed _LAZY table first
    ("language/transformer.py", "setattr"),  # builds Build's methods from a constant tuple of operator names
    ("cli/app.py", "getattr"),  # NAME_cmd of a command module, NAME from the fixed _COMMANDS table
    # `gradflow inspect FILE.py:FUNCTION` runs the user's own Python file by design (like pytest does);
    # it fetches FUNCTION from that module. Expression text never reaches it.
    ("cli/inspect_command.py", "getattr"),
}


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            yield name, node


@functools.cache  # parsed once per process: the tests only read the trees
def _sources():
    files = sorted(PACKAGE.rglob("*.py"))  # every subpackage too
    assert len(files) > 40 and any(p.parent != PACKAGE for p in files)
    names = [str(p.relative_to(PACKAGE)) for p in files]
    return tuple((name, ast.parse(p.read_text(), name)) for name, p in zip(names, files))


def test_no_eval_exec_compile_anywhere():
    found = [(f, n.lineno, name) for f, tree in _sources() for name, n in _calls(tree) if name in BANNED_CALLS]
    assert found == []


def test_dynamic_attribute_access_only_where_allowed():
    found = set()
    for f, tree in _sources():
        for name, node in _calls(tree):
            literal = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            if name in DYNAMIC_ATTR and not literal:
                found.add((f, name))
    assert found <= ALLOWED, found - ALLOWED


def test_no_pickle_like_modules_and_torch_load_is_weights_only():
    for f, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not {m.split(".")[0] for m in mods} & BANNED_MODULES, (f, mods)
        for name, node in _calls(tree):
            if name == "load" and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "torch":
                kw = {k.arg: k.value for k in node.keywords}
                assert isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True, f


def test_no_shell():
    """Running a program (Graphviz `dot`) passes an argument list, never a shell command line."""
    for f, tree in _sources():
        for name, node in _calls(tree):
            assert name not in SHELL_CALLS, (f, node.lineno)
            shell = [k for k in node.keywords if k.arg == "shell"]
            assert not shell or (isinstance(shell[0].value, ast.Constant) and shell[0].value.value is False), f


@pytest.mark.parametrize("source", ["__class__", "x.__class__", "().__class__.__bases__", "__import__('os')",
                                    "_x", "x.__dict__ = true", "exec(x)", "eval(x)", "getattr(x, y)",
                                    "x.requires_grad.__class__ = true", "x; import os"])
def test_grammar_rejects_dunder_and_python(source):
    with pytest.raises(ParseError) as info:
        parse(source)
    assert info.value.kind in ("syntax", "unknown_function")


def test_dunder_message_says_names_start_with_a_letter():
    with pytest.raises(ParseError, match=r"names start with a letter"):
        parse("__class__")


def test_cli_dunder_is_exit_2(cli):
    res = cli("eval", "__import__('os').system('echo hi')", "--x", "1")
    assert res.exit_code == 2 and "names start with a letter" in res.stderr and "hi" not in res.stdout


def test_value_named_dunder_is_refused():
    with pytest.raises(ValueInputError, match="which the program does not use"):
        explain("x", x=1, values={"__class__": 1}, strict=True)
    result = explain("x", x=1, values={"__class__": 1})  # unused: a warning, and never looked at
    assert [w.kind for w in result.warnings] == ["unused_value"] and "__class__" not in result.inputs


RUNS_A_FILE = {"exec_module", "run_path", "run_module", "spec_from_file_location"}
# The only modules that run a Python file, and why: each runs the file the user named on the command line,
# the user's own code, by design (like pytest or python itself). Expression text never reaches them.
RUNS_FILES = {"cli/inspect_command.py",  # gradflow inspect FILE.py:FUNCTION imports FILE.py
              "script/run.py"}  # gradflow script FILE.py runs FILE.py as __main__


def test_only_the_two_commands_named_for_it_run_a_python_file():
    found = set()
    for f, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in RUNS_A_FILE:
                found.add(f)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if {m.split(".")[0] for m in mods} & {"runpy"}:
                    found.add(f)
    assert found <= RUNS_FILES, found - RUNS_FILES
