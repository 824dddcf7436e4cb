"""gradflow.explain_errors on a function: it runs plain, and only once torch has raised runs the same call again,
recorded, to explain it (the failure classes themselves are tested in both forms in test_failures*.py).

Oracles: plain torch runs of the same scripts (which seed fails, what torch says, which line raised), the
scripts' own text for the lines, and side effects counted in the scripts themselves.
"""
from __future__ import annotations

import runpy
import traceback

import pytest
import torch

import gradflow

from .scripts import line_of, write_script


def _raised_at(err, path) -> int:
    """The line of the script the error was raised from (its innermost frame there)."""
    return [f.lineno for f in traceback.extract_tb(err.__traceback__) if f.filename == str(path)][-1]


COUNTED = """
    import torch
    import gradflow

    calls = []
    w = torch.randn(3, 2, requires_grad=True)


    @gradflow.explain_errors
    def step(x):
        \"\"\"One step.\"\"\"
        calls.append(x)
        loss = torch.tanh(x @ w).sum()
        loss.backward()
        return loss
"""


def test_a_step_that_succeeds_runs_once_and_returns_its_value(tmp_path):
    ns = runpy.run_path(str(write_script(tmp_path, "counted", COUNTED)))
    x = torch.randn(4, 3)
    loss = ns["step"](x)
    assert len(ns["calls"]) == 1
    assert torch.equal(loss, torch.tanh(x @ ns["w"]).sum())
    want = x.T @ (1 - torch.tanh(x @ ns["w"]) ** 2)  # d/dw sum(tanh(xw)), by hand
    assert torch.allclose(ns["w"].grad, want, atol=1e-6)  # (a sum near 0 in float32: no relative bound there)
    assert (ns["step"].__name__, ns["step"].__doc__) == ("step", "One step.")


def test_each_decorator_spelling_and_the_call_form_rerun_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = COUNTED + """
    @gradflow.explain_errors()
    def parens(x):
        calls.append(x)
        y = torch.sigmoid(x @ w)
        y += 1
        y.sum().backward()


    def bare(x):
        calls.append(x)
        y = torch.sigmoid(x @ w)
        y += 2
        y.sum().backward()
    """
    path = write_script(tmp_path, "spelled", body)
    ns = runpy.run_path(str(path))
    for fn, write in ((ns["parens"], "y += 1"), (gradflow.explain_errors(ns["bare"]), "y += 2")):
        ns["calls"].clear()
        with pytest.raises(RuntimeError) as info:
            fn(torch.randn(4, 3))
        assert len(ns["calls"]) == 2  # the call, then once again to explain it
        assert info.value.gradflow.modified_at == [line_of(path, write)]


def test_nested_and_inside_the_with_form_nothing_runs_a_third_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "nested", COUNTED + """
    @gradflow.explain_errors
    def outer(x):
        calls.append("outer")
        h = torch.exp(x @ w)
        h[:, 0] = 0
        h.sum().backward()
    """)
    ns = runpy.run_path(str(path))
    calls, outer = ns["calls"], ns["outer"]
    with pytest.raises(RuntimeError) as info:
        gradflow.explain_errors(outer)(torch.randn(4, 3))  # decorated twice: the inner one explains
    assert calls == ["outer", "outer"]
    assert info.value.gradflow.modified_at == [line_of(path, "h[:, 0] = 0")]
    calls.clear()
    with pytest.raises(RuntimeError) as info, gradflow.explain_errors():
        outer(torch.randn(4, 3))  # the with-form records it: no second run
    assert calls == ["outer"]
    assert info.value.gradflow.modified_at == [line_of(path, "h[:, 0] = 0")]


DROPOUT = """
    import torch
    import gradflow

    w = torch.randn(3, 3, requires_grad=True)


    def step(x):
        h = torch.nn.functional.dropout(x, p=0.5, training=True)
        y = torch.sigmoid(h @ w)
        if h[0, 0] == 0:
            y += 1
        y.sum().backward()
"""


def test_the_second_run_draws_the_same_dropout_mask(tmp_path, monkeypatch):
    """A step that fails only when dropout drops h[0, 0]. Plain torch finds a seed whose first call fails and
    whose next call (the RNG moved on) does not: a second run that did not put torch's RNG back would not fail."""
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "dropout", DROPOUT)
    ns = runpy.run_path(str(path))
    step, x = ns["step"], torch.ones(2, 3)

    def fails() -> bool:
        try:
            step(x)
        except RuntimeError:
            return True
        return False

    seed = next(s for s in range(1000) if torch.manual_seed(s) and fails() and not fails())
    torch.manual_seed(seed)
    with pytest.raises(RuntimeError) as info:
        gradflow.explain_errors(step)(x)
    f = info.value.gradflow
    assert f.kind == "inplace_saved" and f.modified_at == [line_of(path, "y += 1")]
    assert f.saved_by["line"] == line_of(path, "torch.sigmoid(")


def test_a_failure_the_second_run_does_not_repeat_keeps_torchs_error_with_a_note(tmp_path):
    path = write_script(tmp_path, "once", COUNTED + """
    @gradflow.explain_errors
    def first_time_only(x):
        calls.append(x)
        y = torch.sigmoid(x @ w)
        if len(calls) == 1:
            y += 1
        y.sum().backward()


    @gradflow.explain_errors
    def then_another(x):
        calls.append(x)
        if len(calls) > 1:
            raise ValueError("something else")
        y = torch.sigmoid(x @ w)
        y += 1
        y.sum().backward()
    """)
    ns = runpy.run_path(str(path))
    x = torch.randn(4, 3)
    for fn, said in (("first_time_only", "it did not fail"), ("then_another", "it raised ValueError: something else")):
        ns["calls"].clear()
        with pytest.raises(RuntimeError) as plain:
            ns[fn].__wrapped__(x)  # torch's own error, undecorated
        ns["calls"].clear()
        with pytest.raises(RuntimeError) as info:
            ns[fn](x)
        assert info.value.gradflow is None
        assert str(info.value).startswith(str(plain.value))
        assert _raised_at(info.value, path) == _raised_at(plain.value, path)  # the first run's traceback
        assert f"gradflow ran `{fn}` again to explain this, and {said}" in str(info.value)
        assert "with gradflow.explain_errors():" in str(info.value)


RNN = """
    import torch
    import gradflow

    torch.manual_seed(0)
    W = torch.randn(4, 4, requires_grad=True)


    DECORATOR
    def step(x, hidden):
        hidden = torch.tanh(x + hidden @ W)
        hidden.pow(2).sum().backward()
        return hidden


    hidden = torch.zeros(1, 4)
    for i in range(3):
        hidden = step(torch.randn(1, 4), ARG)
"""


def test_a_graph_an_earlier_call_freed_names_the_argument_that_carries_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def rnn(name, decorator="@gradflow.explain_errors", arg="hidden"):
        return write_script(tmp_path, name, RNN.replace("DECORATOR", decorator).replace("ARG", arg))

    with pytest.raises(RuntimeError, match="backward through the graph a second time") as plain:
        runpy.run_path(str(rnn("rnn_plain", decorator="")))
    path = rnn("rnn")
    with pytest.raises(RuntimeError) as info:
        runpy.run_path(str(path))
    assert str(info.value).startswith(str(plain.value))
    f = info.value.gradflow
    assert (f.kind, f.tensor, f.freed_by) == ("graph_freed", "hidden", None)
    assert f.call == {"op": "step()", "line": line_of(path, "hidden = step("), "argument": "hidden"}
    assert "`hidden = hidden.detach()`" in f.fix
    runpy.run_path(str(rnn("rnn_fixed", decorator="", arg="hidden.detach()")))  # the fix, in plain torch: no error


@pytest.mark.parametrize("backward,said", [
    ("loss.backward()", "the graph it goes back through was made before the call, and the first run's backward() "
                        "freed it"),
    ("loss.backward(retain_graph=True)", "what caused this happened before the call"),
])
def test_what_happened_before_the_call_is_said_to_be_outside_it(tmp_path, monkeypatch, backward, said):
    """The write that broke the graph (an optimizer's step) ran before the function was called: torch's in-place
    error, and a second run that either finds the graph freed by the first, or fails the same way with nothing in
    its record to name."""
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "before", """
        import torch
        import gradflow

        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.randn(5, 3)).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()


        @gradflow.explain_errors
        def backward_of(loss):
            BACKWARD


        backward_of(loss)
    """.replace("BACKWARD", backward))
    with pytest.raises(RuntimeError) as info:
        runpy.run_path(str(path))
    assert "modified by an inplace operation" in str(info.value)
    assert info.value.gradflow is None
    assert f"gradflow ran `backward_of` again" in str(info.value) and said in str(info.value)
