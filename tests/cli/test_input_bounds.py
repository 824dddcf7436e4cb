"""Reading input is bounded: an endless input (/dev/zero) is refused with exit 2 after reading at most about
the limit, in a real process whose address space is capped (so reading it all would die of MemoryError)."""
import os
import sys

import pytest

from ..processes import PYTHON, run

CAP = 1536 * 2**20  # bytes of address space: torch and the interpreter fit, /dev/zero read whole does not
# The child caps itself, then becomes gradflow (run() owns preexec_fn).
_CAPPED = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap})); "
           "os.execv(sys.executable, [sys.executable, '-m', 'gradflow', *sys.argv[1:]])")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (sys.platform.startswith("linux") and
                                                        os.path.exists("/dev/zero")), reason="needs Linux /dev/zero")]


def _capped(args, stdin=None):
    with open("/dev/zero", "rb") if stdin == "zero" else open(os.devnull, "rb") as fh:
        return run(PYTHON + ["-c", _CAPPED.format(cap=CAP), *args], stdin=fh, text=True, timeout=90)


@pytest.mark.parametrize("args,stdin,message", [
    (["eval", "--file", "/dev/zero", "--x", "1"], None,
     "error: the program text in --file /dev/zero has more than 10,000 characters; the limit is 10,000"),
    (["eval", "-", "--x", "1"], "zero",
     "error: the program text on stdin has more than 10,000 characters; the limit is 10,000"),
    (["eval", "--file", "/dev/zero", "--x", "1", "--limit", "length=20000"], None,
     "error: the program text in --file /dev/zero has more than 20,000 characters; the limit is 20,000"),
    (["batch", "/dev/zero"], None,
     "error: line 1 of /dev/zero runs on for more than 100,000,000 bytes without a line break"),
    (["batch", "-"], "zero", "error: line 1 of stdin runs on for more than 100,000,000 bytes without a line break"),
])
def test_endless_input_is_refused_with_exit_2(args, stdin, message):
    res = _capped(args, stdin)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(message), res.stderr
    assert "--limit " in res.stderr and "Traceback" not in res.stderr and "MemoryError" not in res.stderr
