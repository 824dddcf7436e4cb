"""Tables read by programs (`| grep`, `> file`): as wide as they need when COLUMNS is unset, COLUMNS when it is set.

CliRunner's output is not a terminal, like a pipe. Every table-producing command is run with names too long for
80 columns; the oracle is the name itself: each must appear whole on one line (a grep for it finds it).
"""
import textwrap

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

# Each name at most 60 characters (a longer one is abbreviated by design: docs/eval.md#long-expressions), the
# table far wider than 80 columns.
A, B, C = "alpha_value", "beta_value", "gamma_value"
PROGRAM = f"({A}*{B} - detach({A}*{C}))^2"
VALUES = [f"--{A}", "1", f"--{B}", "2", f"--{C}", "7"]
NAMES = [A, B, f"{A}*{B}", f"detach({A}*{C})", f"{A}*{B} - detach({A}*{C})", PROGRAM]
COMMANDS = {
    "eval": ["eval", PROGRAM, *VALUES],
    "whatif": ["whatif", PROGRAM, *VALUES],
    "compare": ["compare", PROGRAM, f"{A}*{B}*{C}", *VALUES],
    "compare --modes": ["compare", "--modes", PROGRAM, *VALUES],
    "graph": ["graph", PROGRAM, *VALUES],
}
WRAPS_AT_80 = {"eval", "whatif", "graph"}  # with COLUMNS=80 these still fold the names (compare lists programs)


def _lines(args, env) -> list[str]:
    res = CliRunner().invoke(app, args, env=env)
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()


@pytest.mark.parametrize("name", COMMANDS)
def test_piped_tables_do_not_wrap_names_without_columns(name):
    lines = _lines(COMMANDS[name], {"COLUMNS": None})
    names = NAMES if name != "compare" else [PROGRAM, f"{A}*{B}*{C}"]
    missing = [n for n in names if not any(n in line for line in lines)]
    assert missing == [], "\n".join(lines)
    if name == "eval":  # grep for a node finds its row, with its value and grad (by hand: -10 and 1 at L)
        row = next(line for line in lines if line.strip().startswith(f"● {PROGRAM} "))
        assert row.split()[-5:] == ["25", "True", "False", "PowBackward0", "1"]
        assert [line.split()[-1] for line in lines if line.split()[1:3] == [f"{A}*{B}", "mul"]] == ["-10"]


@pytest.mark.parametrize("name", sorted(WRAPS_AT_80))
def test_columns_is_still_respected(name):
    lines = _lines(COMMANDS[name], {"COLUMNS": "80"})
    assert max(map(len, lines)) <= 80
    assert max(map(len, _lines(COMMANDS[name], {"COLUMNS": None}))) > 80  # unfolded, the same table is wider


def test_the_tree_written_to_a_file_keeps_long_names_whole(tmp_path):
    out = tmp_path / "tree.txt"
    _lines([*COMMANDS["graph"], "-o", str(out)], {"COLUMNS": None})
    assert out.read_text().splitlines()[0].startswith(f"{PROGRAM}  PowBackward0  value 25  grad 1")


def test_script_and_inspect_tables_do_not_wrap_names(tmp_path):
    name = "the_weights_of_a_layer_with_a_name_much_longer_than_usual_so_it_would_wrap_at_eighty"
    path = tmp_path / "long_names.py"
    path.write_text(textwrap.dedent(f"""\
        import torch
        from torch import nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.{name} = nn.Parameter(torch.ones(2))

        def main():
            model = Model()
            return (model.{name} * 3).sum(), model

        if __name__ == "__main__":
            {name} = torch.ones(2, requires_grad=True)
            loss = ({name} * 3).sum()
            loss.backward()
        """))
    script = _lines(["script", str(path)], {"COLUMNS": None})
    assert any(name in line for line in script), "\n".join(script)
    assert f"{name}.grad = [3, 3]" in script  # d(sum(3w))/dw = 3 for each element, by hand
    report = _lines(["inspect", f"{path}:main"], {"COLUMNS": None})
    assert any(name in line for line in report), "\n".join(report)
