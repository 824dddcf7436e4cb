"""Every program `gradflow script` offers reproduces the backward it stands for, on every script of the suite and
of examples/ that `script` runs; and a script that writes in place where a program cannot follow gets no program,
with the line of the write.

The oracle is plain torch: plain_grads.py (which does not import gradflow) runs each script by itself and reads
what each backward() added to each named leaf's .grad. Each offered program is evaluated by gradflow's own
evaluator (Program.explain, what `gradflow eval` runs).
"""
from pathlib import Path

import pytest
import torch

from gradflow.script.program_writer import NoProgram, Program
from gradflow.script.run import run_script
from gradflow.script.spelling import clean_name

from .generated import generated_script
from .plain_grads import grads_per_backward

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
SCRIPTS = sorted((HERE / "scripts").glob("*.py"))
EXAMPLES = [ROOT / "examples" / name for name in ("classic_2018.py", "script_reasons.py")]  # the examples/ scripts
#                                                                          that `gradflow script` runs
WRITE_LINE = "# the write"


def _corpus() -> list:
    return [pytest.param(p, id=p.name) for p in [*SCRIPTS, *EXAMPLES]] + [pytest.param("generated", id="generated")]


def _programs(path: Path) -> list:
    calls: list = []
    run_script(path, [], lambda call: calls.append(call.program))
    return calls


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # checkpoint_inputs.py's trap
@pytest.mark.parametrize("path", _corpus())
def test_every_offered_program_gives_the_grads_plain_torch_gave(path, tmp_path, capsys):
    if path == "generated":
        path = tmp_path / "generated.py"
        path.write_text(generated_script())
    plain = grads_per_backward(str(path))
    programs = _programs(path)
    assert len(programs) == len(plain)
    for k, (program, want) in enumerate(zip(programs, plain), 1):
        if not isinstance(program, Program):
            continue
        assert want is not None, f"backward {k} raised under plain torch, but a program was offered"
        got = program.explain().grads
        named = {clean_name(name): g for name, g in want.items()}
        assert set(program.wrt) <= set(named), (k, program.wrt, list(want))
        for name in program.wrt:
            if got[name] is None:  # gradflow: no gradient reaches it; torch: .grad None, or nothing added
                assert named[name] is None or not named[name].any(), (k, name, named[name], program.source)
                continue
            assert named[name] is not None, (k, name, got[name], program.source)
            assert torch.allclose(got[name].double(), named[name].double(), rtol=1e-5, atol=1e-6), \
                (k, name, got[name], named[name], program.source)


def test_the_corpus_offers_programs():
    """Not a vacuous replay: most backward calls of the corpus get a program (those that cannot say why)."""
    offered = [p for path in [*SCRIPTS, *EXAMPLES] for p in _programs(path)]
    assert sum(isinstance(p, Program) for p in offered) >= 12


@pytest.mark.parametrize("name", [p.name for p in SCRIPTS if p.name.startswith("write_") and
                                  WRITE_LINE in p.read_text()])
def test_a_write_the_program_cannot_follow_gets_no_program_naming_its_line(name):
    path = HERE / "scripts" / name
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if WRITE_LINE in text)
    [program] = _programs(path)
    assert isinstance(program, NoProgram)
    assert f"{name}:{line}" in program.reason, program.reason


def test_writes_into_the_tensors_themselves_are_followed():
    """`c += 1` after c was used by an add (which saves nothing) and `y += c`: the program follows both, and
    plain torch agrees (the replay above); x.grad by hand: h = x + c, c' = c + 1, y = 2x + c',
    dL/dx = c' + 2*2*y = [4 + 4*6, 5 + 4*9] = [28, 41]."""
    [program] = _programs(HERE / "scripts" / "write_iadd.py")
    assert isinstance(program, Program)
    assert program.explain().grads["x"].tolist() == [28.0, 41.0]
    assert grads_per_backward(str(HERE / "scripts" / "write_iadd.py"))[0]["x"].tolist() == [28.0, 41.0]


def test_a_backward_that_raised_gets_no_program():
    [program] = _programs(HERE / "scripts" / "backward_raises.py")
    assert isinstance(program, NoProgram) and "raised" in program.reason
    assert grads_per_backward(str(HERE / "scripts" / "backward_raises.py")) == [None]  # torch raised too
