"""`gradflow inspect` contains the user's code: whatever it does, the command reports it and exits on its own terms.

Each case runs `python -m gradflow inspect` in a real process (tests/processes.py): exit codes, file
descriptors, threads and signals are the process's. Two at a time, to keep the suite's time down. Every case
checks the exit code, that stdout with --json is one valid JSON document and nothing else, and the message.
Where torch has an answer (the in-place error), it comes from running the same code with plain torch here.
"""
import json
import signal
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..processes import GRADFLOW, child, ended, run

MODEL = '''
import ctypes, os, signal, sys, threading, time
import torch
from torch import nn

print("importing")  # print at import: stderr
os.write(1, b"fd 1 at import\\n")

def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))

def good():
    m = build()
    return m(torch.ones(2, 3)).mean(), m

def exits_0():
    sys.exit(0)  # <exits_0>

def exits_3():
    sys.exit(3)  # <exits_3>

def inner():
    raise BaseException("not an Exception")  # <inner>

def raises_base():
    inner()  # <raises_base>

def raises_interrupt():
    raise KeyboardInterrupt  # <raises_interrupt>

def hook_raises():
    m = build()
    m[0].weight.register_hook(lambda g: g / 0 if g.sum() > 1e9 else {}["no such key"])  # <hook>
    return m(torch.ones(2, 3)).mean(), m

def hook_exits():
    m = build()
    m[0].weight.register_hook(lambda g: sys.exit(4))  # <hook_exits>
    return m(torch.ones(2, 3)).mean(), m

def changed_in_place():
    m = build()
    h = torch.sigmoid(m[0](torch.ones(2, 3)))
    h.mul_(2)  # sigmoid saved its output for backward
    return m[2](h).mean(), m

def on_meta():
    m = nn.Linear(3, 1, device="meta")
    return m(torch.ones(2, 3, device="meta")).mean(), m

def complex_loss():
    w = torch.ones(3, dtype=torch.complex64, requires_grad=True)
    return (w * w).sum(), {"w": w}

def noisy():
    m = build()
    print("print")
    sys.__stdout__.write("sys.__stdout__\\n")
    os.write(1, b"os.write(1)\\n")
    ctypes.CDLL(None).printf(b"printf from C\\n")
    m[0].weight.register_hook(lambda g: os.write(1, b"hook in backward\\n") and None)
    return m(torch.ones(2, 3)).mean(), m

def leaves_a_thread():
    threading.Thread(target=time.sleep, args=(300,), name="forever").start()
    return good()

class StrFails(Exception):
    def __str__(self):
        raise RuntimeError("its __str__ fails")

def bad_str():
    raise StrFails("x")  # <bad_str>

class Odd:
    def __getattribute__(self, name):
        raise RuntimeError("no attribute for you")

def odd_return():
    return Odd(), build()

def own_backward():
    m = build()
    h = torch.sigmoid(m[0](torch.ones(2, 3)))
    h.mul_(2)
    m[2](h).mean().backward()  # <own_backward>
    return m[2](h).mean(), m

def os_exit_0():
    os._exit(0)

def os_exit_3():
    os._exit(3)

def hook_os_exit():
    m = build()
    m[0].weight.register_hook(lambda g: os._exit(9))
    return m(torch.ones(2, 3)).mean(), m

def self_kill():
    os.kill(os.getpid(), 9)

def segfault():
    ctypes.string_at(0)

def forks():
    m = build()
    os.fork()  # both processes return: only the one gradflow started may report
    return m(torch.ones(2, 3)).mean(), m

def orphan():
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(300)
        os._exit(0)
    with open("orphan.pid", "w") as f:
        f.write(str(pid))
    return good()

def waits():
    print("waiting", file=sys.stderr, flush=True)
    time.sleep(60)
'''

AT_IMPORT = '''
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()  # <argparse>  (gets gradflow's own arguments)

def main():
    pass
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    (folder / "model.py").write_text(textwrap.dedent(MODEL))
    (folder / "at_import.py").write_text(textwrap.dedent(AT_IMPORT))
    return folder


def line(folder: Path, file: str, marker: str) -> str:
    """`file:N` of the line marked `# <marker>` (the processes run in the folder: paths are shown relative)."""
    for n, text in enumerate((folder / file).read_text().splitlines(), 1):
        if f"# <{marker}>" in text:
            return f"{file}:{n}"
    raise AssertionError(marker)


# case -> (target, exit code, message start: `{at}` is the marker's file:line)
CASES = {
    "exits_0": ("model.py:exits_0", 5, "exits_0() called sys.exit(0) (at {at})"),
    "exits_3": ("model.py:exits_3", 5, "exits_3() called sys.exit(3) (at {at})"),
    "raises_base": ("model.py:raises_base", 5, "raises_base() raised BaseException: not an Exception (at {inner})"),
    "raises_interrupt": ("model.py:raises_interrupt", 5, "raises_interrupt() raised KeyboardInterrupt (at {at})"),
    "hook": ("model.py:hook_raises", 5, "backward raised KeyError: 'no such key' (at {at})"),
    "hook_exits": ("model.py:hook_exits", 5, "backward called sys.exit(4) (at {at})"),
    "changed_in_place": ("model.py:changed_in_place", 5, "backward failed: a tensor saved for backward was changed "
                                                         "in place"),
    "on_meta": ("model.py:on_meta", 2, "the loss is on the meta device"),
    "complex_loss": ("model.py:complex_loss", 2, "the loss must be a real number, got a torch.complex64 tensor"),
    "argparse": ("at_import.py:main", 5, "importing {file} called sys.exit(2) (at {at})"),
    "bad_str": ("model.py:bad_str", 5, "bad_str() raised StrFails: <its message cannot be shown: str() raised "
                                       "RuntimeError> (at {at})"),
    "odd_return": ("model.py:odd_return", 2, "the loss must be a tensor, got Odd"),
    "own_backward": ("model.py:own_backward", 5, "backward failed: a tensor saved for backward was changed in place "
                                                 "(at {at})"),
    "os_exit_0": ("model.py:os_exit_0", 5, "your code ended the process with exit status 0 while running "
                                           "os_exit_0() (os._exit(0) or C's exit())"),
    "os_exit_3": ("model.py:os_exit_3", 5, "your code ended the process with exit status 3 while running "
                                           "os_exit_3() (os._exit(3) or C's exit())"),
    "hook_os_exit": ("model.py:hook_os_exit", 5, "your code ended the process with exit status 9 while running "
                                                 "backward (os._exit(9) or C's exit())"),
    "self_kill": ("model.py:self_kill", 5, "the process running your code was killed by SIGKILL while running "
                                           "self_kill()"),
    "segfault": ("model.py:segfault", 5, "the process running your code was killed by SIGSEGV while running "
                                         "segfault() (a crash in C code: a segmentation fault)"),
    "forks": ("model.py:forks", 0, None),
    "orphan": ("model.py:orphan", 0, None),
    "noisy": ("model.py:noisy", 0, None),
    "leaves_a_thread": ("model.py:leaves_a_thread", 0, None),
}


@pytest.fixture(scope="module")
def results(files):
    """Every case's process, two at a time: {case: CompletedProcess}."""
    def one(case):
        try:
            return case, run(GRADFLOW + ["inspect", CASES[case][0], "--json"], text=True, cwd=files, timeout=90)
        except BaseException as failed:  # a case past its deadline fails its own test only
            return case, failed

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, CASES))


def result(results, case):
    if isinstance(results[case], BaseException):
        raise results[case]
    return results[case]


def _torch_in_place_message() -> str:
    """Plain torch, the same code: what loss.backward() says."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    h = torch.sigmoid(m[0](torch.ones(2, 3)))
    h.mul_(2)
    with pytest.raises(RuntimeError) as info:
        m[2](h).mean().backward()
    return str(info.value)


def _document(res) -> dict:
    """stdout holds exactly one JSON document."""
    doc = json.loads(res.stdout)  # fails on anything around it
    assert res.stdout.startswith("{") and res.stdout.endswith("}\n")
    return doc


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c, (_, _, message) in CASES.items() if message])
def test_a_failure_of_the_users_code_is_reported_as_theirs(case, files, results):
    res = result(results, case)
    target, code, message = CASES[case]
    file = target.split(":")[0]
    marker = {"hook": "hook", "argparse": "argparse"}.get(case, case)
    at = line(files, file, marker) if f"# <{marker}>" in (files / file).read_text() else None
    expected = message.format(at=at, inner=line(files, "model.py", "inner"), file=file)
    assert res.returncode == code, res.stderr
    if case in ("changed_in_place", "own_backward"):  # gradflow's explanation (#31), then torch's own words
        assert f"torch says: RuntimeError: {_torch_in_place_message()}" in res.stderr
        assert "use the out-of-place `mul` (`h = h.mul(2)`)" in res.stderr  # from the line `h.mul_(2)`
    error = _document(res)["error"]
    assert error["message"].startswith(expected)
    assert f"error: {expected}" in res.stderr
    assert "Traceback (most recent call last)" not in res.stderr and "internal error" not in res.stderr
    assert "fd 1 at import" in res.stderr or case == "argparse"  # the import's output went to stderr


@pytest.mark.slow
def test_the_traceback_shows_only_the_users_frames(files, results):
    error = _document(result(results, "raises_base"))["error"]
    assert [(f"{f['file']}:{f['line']}", f["function"]) for f in error["traceback"]] == [
        (line(files, "model.py", "raises_base"), "raises_base"), (line(files, "model.py", "inner"), "inner")]
    assert error["traceback"][-1]["code"] == 'raise BaseException("not an Exception")  # <inner>'
    err = result(results, "raises_base").stderr
    assert 'in inner\n    raise BaseException("not an Exception")' in err and "gradflow/" not in err


@pytest.mark.slow
def test_stdout_holds_only_the_json_whatever_the_code_writes_to_fd_1(results):
    res = result(results, "noisy")
    assert res.returncode == 0, res.stderr
    doc = _document(res)
    assert [p["status"] for p in doc["params"]] == ["live"] * 4
    for said in ("importing", "fd 1 at import", "print", "sys.__stdout__", "os.write(1)", "printf from C",
                 "hook in backward"):
        assert f"{said}\n" in res.stderr


@pytest.mark.slow
def test_a_thread_left_running_does_not_hold_the_exit(results):
    res = result(results, "leaves_a_thread")  # the thread sleeps 300 s; the case's deadline is 90 s
    assert res.returncode == 0, res.stderr
    warnings = _document(res)["warnings"]
    assert warnings == ["your code left 1 thread running (forever); gradflow exits without waiting for them"]


@pytest.mark.slow
def test_a_real_ctrl_c_is_still_an_interrupt(files):
    with child(GRADFLOW + ["inspect", f"{files / 'model.py'}:waits", "--json"], timeout=90) as proc:
        for said in iter(proc.stderr.readline, b""):
            if said == b"waiting\n":
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert out == b"" and b"Traceback" not in err and b"error:" not in err


SHADOWS = {
    "rich.py": "raise ImportError('the user\\'s own rich.py was imported')\n",
    "typer.py": "raise ImportError('the user\\'s own typer.py was imported')\n",
    "torch.py": "raise ImportError('the user\\'s own torch.py was imported')\n",
    "helpers.py": "def width():\n    return 4\n",  # a sibling module of their own: must still import
    "model.py": textwrap.dedent('''
        import torch
        from torch import nn
        import helpers

        def main():
            import rich  # gradflow's rich was imported first: theirs is never reached
            m = nn.Linear(3, helpers.width())
            return m(torch.ones(2, 3)).sum(), m
        '''),
}


@pytest.mark.slow
def test_modules_beside_the_model_do_not_shadow_gradflows_own(tmp_path):
    for name, text in SHADOWS.items():
        (tmp_path / name).write_text(text)
    res = run(GRADFLOW + ["inspect", f"{tmp_path / 'model.py'}:main"], text=True, cwd=tmp_path.parent, timeout=90)
    assert res.returncode == 0, res.stderr
    assert "● weight" in res.stdout and "● bias" in res.stdout and "gets gradient" in res.stdout
    assert res.stderr == ""


def test_the_models_folder_leaves_sys_path_afterwards(cli, tmp_path):
    (tmp_path / "helpers.py").write_text("SCALE = 2.0\n")
    (tmp_path / "m.py").write_text(textwrap.dedent('''
        import torch
        import helpers

        def main():
            w = torch.ones(2, requires_grad=True)
            return (w * helpers.SCALE).sum(), {"w": w}

        def fails():
            raise ValueError("no")
        '''))
    before = list(sys.path)
    assert json.loads(cli("inspect", f"{tmp_path / 'm.py'}:main", "--json").stdout)["params"][0]["grad_norm"] == \
        pytest.approx(2 * 2 ** 0.5)  # d/dw sum(2w) = [2, 2]
    assert cli("inspect", f"{tmp_path / 'm.py'}:fails").exit_code == 5
    assert sys.path == before


def test_debug_shows_the_whole_traceback(cli, tmp_path):
    (tmp_path / "m.py").write_text("def helper():\n    raise ValueError('deep')\n\ndef main():\n    helper()\n")
    short = cli("inspect", f"{tmp_path / 'm.py'}:main")
    assert short.exit_code == 5 and "Traceback (most recent call last)" not in short.stderr
    assert 'line 5, in main\n    helper()\n' in short.stderr and "gradflow/" not in short.stderr
    full = cli("inspect", f"{tmp_path / 'm.py'}:main", "--debug")
    assert full.exit_code == 5 and "Traceback (most recent call last)" in full.stderr
    assert "gradflow/cli/user_code.py" in full.stderr and "ValueError: deep" in full.stderr


@pytest.mark.slow
def test_the_traceback_leaves_out_torchs_frames(files, results):
    """FUNCTION's own backward() fails inside torch's engine: the frames shown are the user's only (#30)."""
    res = result(results, "own_backward")
    frames = _document(res)["error"]["traceback"]
    assert [(f"{f['file']}:{f['line']}", f["function"]) for f in frames] == [
        (line(files, "model.py", "own_backward"), "own_backward")]
    assert "torch/" not in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["os_exit_0", "os_exit_3", "hook_os_exit", "self_kill", "segfault"])
def test_code_that_ends_the_process_is_reported_never_a_silent_exit(case, results):
    """os._exit, a signal, a crash in C: the watching parent reports the death (exit 5); `--json` still gets
    its one error document."""
    res = result(results, case)
    assert res.returncode == 5, res.stderr
    assert _document(res)["error"]["kind"] == "process_ended"
    assert "so gradflow could not finish its report" in res.stderr


@pytest.mark.slow
def test_a_process_the_code_forks_never_reports(results):
    res = result(results, "forks")
    assert res.returncode == 0, res.stderr
    assert [p["status"] for p in _document(res)["params"]] == ["live"] * 4  # one document: the forked copy's none


@pytest.mark.slow
def test_nothing_the_code_forked_outlives_the_command(files, results):
    res = result(results, "orphan")  # its child ignores SIGTERM and sleeps 300 s
    assert res.returncode == 0, res.stderr
    assert ended(int((files / "orphan.pid").read_text()))


@pytest.mark.slow
def test_a_keyboard_interrupt_their_code_raises_is_theirs_with_sigint_ignored(files):
    """Started in the background (`cmd &`, nohup), a process ignores SIGINT: no Ctrl-C can reach it, so a
    KeyboardInterrupt is the code's own, exit 5 with its line, not a silent 130 (a fuzz run in the background)."""
    import signal
    import subprocess

    from ..processes import child_env

    res = subprocess.run(GRADFLOW + ["inspect", "model.py:raises_interrupt"], text=True, cwd=files, timeout=90,
                         capture_output=True, env=child_env(None),
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    at = line(files, "model.py", "raises_interrupt")
    assert res.returncode == 5, res.stderr
    assert f"raises_interrupt() raised KeyboardInterrupt (at {at})" in res.stderr
