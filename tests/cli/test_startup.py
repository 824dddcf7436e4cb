"""Start-up work kept off the common paths: no torch or pydantic for --help and syntax errors,
Typer's coercion still right for the values that need it, no parse-table cache to poison."""
import pytest

from gradflow import compat

from ..processes import GRADFLOW, PYTHON, run


def _run(*args, env=None):
    return run([GRADFLOW[0], "-X", "importtime", *GRADFLOW[1:], *args], text=True, env=env)


def _imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("args", [["--help"], ["eval", "x +", "--x", "1"], ["eval", "x*y", "--x", "1"],
                                  ["eval", "x.sigmod()", "--x", "1"], ["eval", "F.softmax(x, dims=0)", "--x", "1"],
                                  ["eval", "with torch.no_grad():\n    c = x\n  c", "--x", "1"], ["ops"],
                                  ["eval", "x^2", "--x", "1", "--brief", "--flows"],
                                  ["batch", "-", "--text", "--jobs", "2", "--first-line", "3", "--x", "1"]])
def test_help_and_early_errors_import_neither_torch_nor_pydantic(args):
    res = _run(*args)
    assert res.returncode in (0, 2)
    mods = _imported(res.stderr)
    assert "torch" not in mods
    if compat.typer_coercion_applies():  # only where the Typer shortcut applies
        assert "pydantic" not in mods


_MODULES_AT_EXIT = """
import atexit, sys
atexit.register(lambda: print(" ".join(sorted(sys.modules)), file=sys.__stderr__))
sys.argv = ["gradflow", *sys.argv[1:]]
from gradflow.cli.app import run
run()
"""


def _modules_at_exit(*args) -> set[str]:
    res = run([*PYTHON, "-c", _MODULES_AT_EXIT, *args], text=True)
    return set(res.stderr.splitlines()[-1].split())


def test_a_run_builds_only_its_command():
    mods = _modules_at_exit("eval", "x +", "--x", "1")
    assert "gradflow.cli.eval_command" in mods and "lark" in mods
    assert not {"gradflow.cli.batch_command", "gradflow.cli.inspect_command", "gradflow.cli.script_command"} & mods
    helped = _modules_at_exit("--help")  # the command list needs every command
    assert {"gradflow.cli.batch_command", "gradflow.cli.inspect_command", "gradflow.cli.script_command"} <= helped


def test_options_still_coerced(cli, tmp_path):
    prog = tmp_path / "p.txt"
    prog.write_text("x*y")
    res = cli("eval", "--file", str(prog), "--var", "x=2", "--var", "y=5", "--dtype", "float64", "--wrt", "all",
              "--json")
    assert res.exit_code == 0, res.stderr
    assert '"grads": {"x": 5.0, "y": 2.0}' in res.stdout and '"dtype": "float64"' in res.stdout


_STATE = """
import gc, importlib, sys
from typer import core
patch = core.build_runtime_param
for name in sys.argv[1:]:
    importlib.import_module(name)
print(gc.isenabled(), gc.get_freeze_count(), core.build_runtime_param is patch)
"""


def _state_after_importing(*modules: str) -> list[str]:
    res = run([*PYTHON, "-c", _STATE, *modules], text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_importing_the_command_changes_no_global_state():
    """The collector, its frozen objects and Typer stay as they were: only run() changes them."""
    assert _state_after_importing("gradflow.cli.app", "gradflow.cli.startup", "gradflow.compat") == \
        ["True", "0", "True"]


@pytest.mark.slow
def test_importing_any_gradflow_module_changes_no_global_state():
    """Every module but the entry point."""
    import pkgutil

    import gradflow

    names = [m.name for m in pkgutil.walk_packages(gradflow.__path__, "gradflow.")
             if m.name != "gradflow.__main__"]
    assert len(names) > 100
    assert _state_after_importing(*names) == ["True", "0", "True"]


_PAYLOAD = """
import os, pickle, sys
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))
with open(sys.argv[1], "wb") as fh:
    pickle.dump(Payload(), fh)
"""


@pytest.mark.slow
def test_a_poisoned_parse_table_cache_never_runs(tmp_path):
    """lark's own cache is a pickle: a planted file (a CI cache shared between jobs) would run code. gradflow
    reads no cache file at all (the tables ship with the package), so the payload never runs."""
    marker = tmp_path / "pwned"
    cache_dir = tmp_path / "gradflow"
    cache_dir.mkdir()
    for name in ("grammar-lark-py311.cache", "grammar-lark-py310.cache", "grammar-lark-py312.cache"):
        assert run(PYTHON + ["-c", _PAYLOAD, str(cache_dir / name), str(marker)]).returncode == 0
    res = _run("eval", "x*3", "--x", "1", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert res.returncode == 0 and "x.grad = 3" in res.stdout
    assert not marker.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(
        ["grammar-lark-py311.cache", "grammar-lark-py310.cache", "grammar-lark-py312.cache"])  # nothing written


_FROZEN = ("import atexit, gc, sys\n"
           "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n")


def _frozen(code: str) -> int:
    res = run(PYTHON + ["-c", _FROZEN + code], text=True)
    assert res.returncode == 0, res.stderr
    return int(res.stderr.split("frozen")[-1])


@pytest.mark.slow
def test_commands_freeze_torch_out_of_the_collector_and_the_library_does_not():
    """A command freezes torch's objects once it has imported them (full collections and the shutdown's walk
    them otherwise); explain() in a user's process leaves the collector as it was."""
    command = ("sys.argv = ['gradflow', 'eval', 'x*2', '--x', '1', '--json']\n"
               "from gradflow.cli.app import run\nrun()\n")
    library = "from gradflow import explain\nassert explain('x*2', x=1).grad('x') == 2.0\n"
    assert _frozen(command) > 100_000  # torch alone brings a few hundred thousand objects
    assert _frozen(library) == 0
