"""Property: any input gets a result or a package error (exit 2/3) — never another exception.

Modest example counts keep CI fast; `python bench/fuzz.py --inputs 100000` is the long run.
"""
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradflow import GradflowError, parse

from ..fuzz_support import (ALPHABET, cases, check_api, check_cli, gen_case, near_misses, programs, random_text,
                           value_sets, wrts)

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.one_of(random_text, st.text(), st.lists(st.sampled_from(ALPHABET), max_size=60).map("".join)))
def test_random_text_parses_or_raises_a_parse_error(text):
    try:
        parse(text)
    except GradflowError as err:
        assert err.exit_code == 2 and err.message


@FAST
@given(cases)
def test_any_case_through_the_library(case):
    check_api(case)


@FAST
@given(programs, value_sets, wrts)
def test_grammar_shaped_programs_with_fitted_values(source, values, wrt):
    check_api({"source": source, "values": values, "wrt": wrt, "fit": True, "dtype": "float32", "limits": None})


@FAST
@given(near_misses())
def test_near_misses(source):
    check_api({"source": source, "values": {}, "wrt": None, "fit": True, "dtype": "float64", "limits": None})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_any_case_through_the_cli(case):
    check_cli(case)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32))
def test_the_long_run_generator(i):
    """A sample of bench/fuzz.py's inputs (seeded random generator), also through the CLI."""
    case = gen_case(random.Random(f"1:{i}"))
    check_api(case)
    if i % 4 == 0:
        check_cli(case)


def test_generated_batch_inputs_get_one_record_per_line():
    """Nested JSON, invalid UTF-8, bare \r and \r\n, byte-order marks, binary: every non-blank line gets its
    record, in order (line numbers as the bytes split), and the batch never stops early; one input in four
    through worker processes (their chunks must split and join the lines alike)."""
    import random

    from typer.testing import CliRunner

    from ..fuzz_support import check_batch_bytes, gen_batch_bytes

    runner = CliRunner()
    exits = {check_batch_bytes(gen_batch_bytes(random.Random(f"suite:{i}")), runner, jobs=2 if i % 4 == 0 else 1)
             for i in range(60)}
    assert exits <= {0, 4}  # (nearly every generated input holds a bad line: 4)
