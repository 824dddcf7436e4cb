"""Test helpers: assert, in your own test suite, that gradient reaches every parameter it should.

    from gradflow.testing import assert_gradients_flow

    def test_gradients_reach_every_trainable_parameter():
        model = MyModel()
        assert_gradients_flow(lambda m: m(torch.randn(4, 8)).sum(), model, allow=["aux_head.*"])

The check is `gradflow inspect --fail-on` from Python (classes: gradflow.report.fail_on.CLASSES). `.grad` is
left as it was.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

from gradflow.report.fail_on import DEFAULT, failures, parse_classes

__all__ = ["assert_gradients_flow"]


def assert_gradients_flow(loss_fn: Callable, model, *, allow: Iterable[str] = (), fail_on=DEFAULT,
                          optimizer=None):
    """Run `loss_fn` under gradflow.trace() and fail if a parameter of `model` is in a `fail_on` class.

    loss_fn: called with the model if it takes an argument, else with none; returns a scalar loss tensor.
    model: an nn.Module, or a dict of name -> tensor.
    allow: glob patterns (fnmatch) on parameter names that may fail, e.g. ["embed.*", "*.bias"].
    fail_on: class names, a list or "cut,unused"; default cut, unused, unreached, zero, nonfinite
        (gradient reaches every parameter that requires grad). Add "frozen" to also fail on frozen ones,
        "untrained" / "orphan" with an optimizer.
    optimizer: checks that it holds exactly the parameters that get gradient (classes untrained, orphan).

    Returns the InspectReport when nothing failed. Raises AssertionError listing each offending parameter
    with its class and reason (the reason names the file:line of a cut or a freeze).
    """
    from gradflow.report.build import trace

    wanted = parse_classes(fail_on)
    allow = [allow] if isinstance(allow, str) else list(allow)
    with trace() as t:
        loss = loss_fn(model) if _takes_argument(loss_fn) else loss_fn()
    if isinstance(loss, tuple):
        loss = loss[0]
    report = t.explain(loss, params=model, optimizer=optimizer)
    if report.error is not None and report.error.kind == "no_gradient":
        raise AssertionError(f"no gradient reaches any parameter: {report.error.message}")
    found = failures(report, wanted, allow)
    if found:
        names = {f.name for f in found}
        wide = max(len(f.name) for f in found)
        lines = [f"  {f.name:<{wide}}  {f.kind}: {f.reason}" for f in found]
        raise AssertionError(f"gradient does not flow as it should to {len(names)} parameter"
                             f"{'s' * (len(names) != 1)} (fail_on={','.join(wanted)}"
                             f"{', allow=' + ','.join(allow) if allow else ''}):\n" + "\n".join(lines))
    return report


def _takes_argument(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)
