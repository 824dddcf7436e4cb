"""Generated user code for `gradflow inspect`: it exits, raises, writes to fd 1, leaves threads, breaks hooks,
ends its own process (os._exit, SIGKILL, a segfault), forks a copy of itself or an orphan that ignores SIGTERM.

Used by bench/fuzz.py --user-code N (real processes: each imports torch) and, a few cases, by the suite.
The property: the command ends within its deadline with a documented exit code (0, 2, 3, 4 or 5), never an
internal error or a Python traceback without --debug, never an exit without a word on stdout or stderr, with
--json stdout is exactly one JSON document, and nothing the command started outlives it (tests/processes.py:
processes_left).
Not collected by pytest (no test_ prefix).
"""
from __future__ import annotations

import json

ACTIONS = {
    "nothing": "",
    "exit0": "sys.exit(0)",
    "exit3": "sys.exit(3)",
    "exit_text": "sys.exit('stop here')",
    "raise": "raise ValueError('bad \\x1b[31m batch')",
    "base": "raise BaseException('base')",
    "kbd": "raise KeyboardInterrupt",
    "fd1": "os.write(1, b'{not json\\n')",
    "dunder_stdout": "sys.__stdout__.write('stray\\n'); sys.__stdout__.flush()",
    "print": "print('from the user')",
    "thread": "threading.Thread(target=time.sleep, args=(600,)).start()",
    "inplace": "w.data.mul_(1)",
    "os_exit0": "os._exit(0)",
    "os_exit3": "os._exit(3)",
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "segfault": "ctypes.string_at(0)",
    "fork": "os.fork()",  # a copy of the work goes on to its end: it must never report
    "orphan": "os.fork() == 0 and (signal.signal(signal.SIGTERM, signal.SIG_IGN), time.sleep(600))",
}
PLACES = ("import", "before_loss", "after_loss", "hook")
RETURNS = ("loss", "loss_model", "scalar_float", "none", "vector")


def gen_user_code(rng) -> str:
    """A module with a `main()` for `gradflow inspect FILE.py:main`."""
    action, place, ret = rng.choice(list(ACTIONS)), rng.choice(PLACES), rng.choice(RETURNS)
    code = ACTIONS[action]
    lines = ["import ctypes, os, signal, sys, threading, time", "import torch", "from torch import nn",
             "torch.manual_seed(0)", "w = nn.Parameter(torch.ones(3))"]
    if place == "import":
        lines.append(code)
    body = ["    model = nn.Linear(3, 1)", "    x = torch.ones(2, 3)"]
    if place == "before_loss":
        body.append("    " + code)
    if place == "hook" and code:
        body.append(f"    model.weight.register_hook(lambda g: ({code.replace(';', ',')}, g)[1])"
                    if "raise" not in code else "    model.weight.register_hook(lambda g: 1 / 0)")
    body.append("    loss = (model(x * w) ** 2).mean()" if rng.random() < 0.8 else "    loss = model(x).sum().detach()")
    if place == "after_loss":
        body.append("    " + code)
    body.append({"loss": "    return loss", "loss_model": "    return loss, model", "scalar_float": "    return 1.5",
                 "none": "    return None", "vector": "    return model(x)"}[ret])
    return "\n".join(lines + ["", "", "def main():", *body]) + "\n"


def check_user_code(stdout: str, stderr: str, returncode: int, as_json: bool) -> int:
    assert returncode in (0, 2, 3, 4, 5), (returncode, stderr[-2000:])
    assert "internal error" not in stderr and "Traceback (most recent call last)" not in stderr, stderr[-2000:]
    assert stdout.strip() or stderr.strip(), f"exit {returncode} without a word"
    if as_json:
        json.loads(stdout)  # exactly one document: nothing the user's code wrote got in
    return returncode

