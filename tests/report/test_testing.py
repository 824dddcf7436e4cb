"""gradflow.testing.assert_gradients_flow, and examples/test_gradients.py (the README's test file) run here.

What must fail is decided by plain torch: a plain backward on the same model, `p.grad is None`.
"""
import importlib.util
import inspect
import re

import pytest
import torch
from torch import nn

from gradflow.testing import assert_gradients_flow

from ..processes import ROOT

EXAMPLE = ROOT / "examples" / "test_gradients.py"


def _example():
    spec = importlib.util.spec_from_file_location("example_test_gradients", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MOD = _example()


@pytest.mark.parametrize("name", [n for n in dir(MOD) if n.startswith("test_")])
def test_the_readme_test_file_passes(name):
    getattr(MOD, name)()


def test_the_readme_shows_the_test_file():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## In CI and in your tests", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    head, test = block.split("\n\n", 1)
    assert head + "\n" in EXAMPLE.read_text() and "\n\n\n" + test in EXAMPLE.read_text()


def test_the_example_detach_is_what_torch_says():
    model = MOD.TinyLM()
    model.detach_block = True
    MOD.lm_loss(model).backward()
    none = {n for n, p in model.named_parameters() if p.grad is None}
    fresh = MOD.TinyLM()
    fresh.detach_block = True
    with pytest.raises(AssertionError) as err:
        assert_gradients_flow(MOD.lm_loss, fresh)
    lines = str(err.value).splitlines()
    assert lines[0] == (f"gradient does not flow as it should to {len(none)} parameters "
                        "(fail_on=cut,unused,unreached,zero,nonfinite):")
    listed = {line.split()[0] for line in lines[1:]}
    assert listed == none and none == {n for n, _ in model.named_parameters() if n.startswith(("block.", "embed."))}
    src = inspect.getsource(MOD.TinyLM.forward).splitlines()
    line = MOD.TinyLM.forward.__code__.co_firstlineno + next(i for i, t in enumerate(src) if ".detach()" in t)
    assert all(re.search(rf"cut: cut by `detach\(\)` at \S*test_gradients.py:{line} ", x) for x in lines[1:])
    assert all(p.grad is None for p in fresh.parameters())  # .grad left alone


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.unused = nn.Linear(2, 2), nn.Linear(2, 1), nn.Linear(2, 1)

    def forward(self, x):
        return self.b(self.a(x)).sum()


def test_a_loss_fn_without_arguments_and_the_report_returned():
    model = Small()
    x = torch.ones(3, 2)
    with pytest.raises(AssertionError, match=r"unused\.weight +unused: not used in the forward"):
        assert_gradients_flow(lambda: model(x), model)
    report = assert_gradients_flow(lambda: model(x), model, allow="unused.*")
    assert report.param("a.weight").status == "live"


def test_frozen_only_when_asked_and_a_loss_without_gradient():
    model = Small()
    model.a.requires_grad_(False)
    assert_gradients_flow(lambda m: m(torch.ones(3, 2)), model, allow=["unused.*"])
    with pytest.raises(AssertionError, match=r"a\.weight +frozen: frozen: requires_grad is False"):
        assert_gradients_flow(lambda m: m(torch.ones(3, 2)), model, allow=["unused.*"], fail_on="default,frozen")
    model.requires_grad_(False)
    with pytest.raises(AssertionError, match="no gradient reaches any parameter"):
        assert_gradients_flow(lambda m: m(torch.ones(3, 2)), model)


def test_an_optimizer_that_misses_a_parameter():
    model = Small()
    opt = torch.optim.SGD([*model.a.parameters(), *model.unused.parameters()], lr=0.1)
    with pytest.raises(AssertionError) as err:
        assert_gradients_flow(lambda m: m(torch.ones(3, 2)), model, optimizer=opt, allow=["unused.*"],
                              fail_on="untrained,orphan")
    assert [line.split()[:2] for line in str(err.value).splitlines()[1:]] == [["b.weight", "untrained:"],
                                                                              ["b.bias", "untrained:"]]

