"""integrations/step_check.py with a plain torch training loop (no framework; fast): the verdicts equal plain
torch's `p.grad is None` (plain_models.py, no gradflow), gradient accumulation, a step gradflow cannot trace,
the log message and the gate."""
import pytest
import torch

from gradflow.integrations.step_check import StepCheck, describe
from gradflow.report.fail_on import GateError
from tests.integrations.plain_models import Net, loss_of, net_truth, xy


def steps(model, check, n=1, accumulate=1, use_aux_from=None):
    """A plain training loop with the check's two events around each optimizer step."""
    x, y = xy()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    out = []
    for step in range(n):
        check.begin(model)
        for micro in range(accumulate):
            rows = slice(4 * (step * accumulate + micro), 4 * (step * accumulate + micro + 1))
            loss = loss_of(model, x[rows], y[rows])
            if use_aux_from is not None and micro >= use_aux_from:
                loss = loss + model.aux(torch.relu(model.body(x[rows]))).mean()
            loss.backward()
        out.append(check.end(model, step + 1))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("case", ["fine", "frozen", "unused"])
def test_verdicts_equal_plain_torch(case):
    (found,) = steps(Net(case), StepCheck())
    assert {p.name: p.grad is None for p in found.params} == net_truth(Net(case))


def test_the_message():
    (found,) = steps(Net("unused"), StepCheck())
    lines = describe(found).splitlines()
    assert lines[0] == "gradflow: step 1: 2 of 6 trainable parameter tensors got no gradient"
    assert lines[1].startswith("  ◌ aux.*  2 tensors  used by `linear` at tests/integrations/plain_models.py:")
    assert lines[1].endswith("but nothing computed from it reaches the loss (unused branch)")
    (found,) = steps(Net("fine"), StepCheck())
    assert describe(found) == "gradflow: step 1: every trainable parameter got a gradient (4 tensors)"


def test_gradient_accumulation_counts_every_micro_batch():
    model = Net("unused")
    (found,) = steps(model, StepCheck(), accumulate=2, use_aux_from=1)  # aux reaches the 2nd micro-batch's loss
    aux = [p for p in found.params if p.name.startswith("aux.")]
    assert [p.status for p in aux] == ["live", "live"] and "gradient accumulation" in aux[0].reason
    assert not found.missing


def test_a_step_without_a_traced_backward_says_so():
    check = StepCheck()
    model = Net("frozen")
    x, y = xy()
    check.begin(model)
    torch.autograd.backward(loss_of(model, x[:4], y[:4]))  # not Tensor.backward: the trace never sees it
    found = check.end(model, 1)
    assert found.note == "the step called no loss.backward() gradflow could see"
    assert {p.name: p.status for p in found.params} == {"body.weight": "live", "body.bias": "frozen",
                                                        "head.weight": "live", "head.bias": "live"}


def test_the_gate_and_the_detach():
    check = StepCheck(fail_on="unused", check_steps=2)
    model = Net("unused")
    with pytest.raises(GateError, match=r"step 1: fail_on=unused: 2 parameters failed \(unused: 2\)") as err:
        check.gate(steps(model, check)[0])
    assert err.value.hint == "fix them, or allow the intended ones: allow=['aux.*'] (globs on parameter names)"
    check = StepCheck(check_steps=2)
    assert [f is not None for f in steps(Net("fine"), check, n=3)] == [True, False, False] and check.done


def test_a_trace_left_on_is_stopped():
    check = StepCheck()
    check.begin(Net("fine"))
    check.stop()
    from gradflow.tracer.module_calls import _TRACES

    assert _TRACES == []  # module calls are plain again
