import pytest

import gradflow


@pytest.fixture(params=["with", "function"])
def explained(request):
    """Call fn(*args) under gradflow.explain_errors in one of its two forms: the with-form, which records as the
    code runs, or the function form, which runs it plain and, once torch has raised, runs the call again recorded."""
    def run(fn, *args):
        if request.param == "with":
            with gradflow.explain_errors():
                return fn(*args)
        return gradflow.explain_errors(fn)(*args)

    run.form = request.param
    return run
