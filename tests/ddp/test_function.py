"""FUNCTION's documented signatures (no processes): (rank, world_size), (rank) or none; it returns (model, step)."""
import pytest

from gradflow.cli.ddp_rank import call_function, error_from
from gradflow.errors import ExitCode, GradflowError


def test_the_signatures_it_accepts():
    step = lambda m: m  # noqa: E731
    assert call_function(lambda rank, world_size: ((rank, world_size), step), "f", 1, 2)[0] == (1, 2)
    assert call_function(lambda rank: (rank, step), "f", 1, 2)[0] == 1
    assert call_function(lambda: ("model", step), "f", 1, 2)[0] == "model"
    assert call_function(lambda rank, world_size, seed=0: (seed, step), "f", 1, 2)[0] == 0
    assert call_function(lambda r, w: ((r, w), step), "f", 1, 2)[0] == (1, 2)  # any names, by position


@pytest.mark.parametrize("func", [
    lambda rank=0, world_size=1: ((rank, world_size), print),  # written to run alone too
    lambda world_size=1, rank=0: ((rank, world_size), print),
    lambda *, rank=0, world_size=1: ((rank, world_size), print),
    lambda local_rank=0, world=1, seed=7: ((local_rank, world), print),
])
def test_rank_and_world_size_reach_parameters_with_defaults(func):
    assert call_function(func, "main", 1, 2)[0] == (1, 2)


def test_other_defaults_are_left_alone():
    assert call_function(lambda lr=0.1: (lr, print), "main", 1, 2)[0] == 0.1


def test_a_loss_instead_of_model_and_step_is_bad_input():
    with pytest.raises(GradflowError, match=r"main\(\) must return \(model, step\)") as err:
        call_function(lambda: 1.5, "main", 0, 2)
    assert err.value.exit_code == ExitCode.INPUT


def test_inspect_s_loss_and_model_is_told_apart():
    class Loss:
        grad_fn = None

    with pytest.raises(GradflowError, match=r"it returned \(loss, model\), as for gradflow inspect"):
        call_function(lambda: (Loss(), print), "main", 0, 2)  # a model is callable too: the loss tells them apart


def test_a_rank_s_error_keeps_its_rank_exit_code_and_frames():
    doc = {"error": {"kind": "user_code", "message": "main() raised ValueError: x", "hint": "fix it", "rank": 1,
                     "exit_code": 5, "traceback": [{"file": "a.py", "line": 3, "function": "main", "code": "x()"}]}}
    err = error_from(doc)
    assert err.exit_code == ExitCode.USER_CODE and err.message.startswith("rank 1: main() raised")
    assert 'File "a.py", line 3, in main' in str(err)
