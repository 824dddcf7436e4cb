"""Run a script under torch's own anomaly mode and say what it names, to compare with `gradflow script`.

    python examples/anomaly_mode.py examples/fail_inplace.py

torch.autograd.detect_anomaly() records each op's forward traceback; when a backward node fails it warns with
that traceback ("Traceback of forward call that caused the error"). This prints the script's own line in it (the
forward of the op whose backward failed), or says that anomaly mode named none, then torch's error.
"""
import linecache
import os
import runpy
import sys
import traceback
import warnings

import torch


def main(path: str) -> int:
    with warnings.catch_warnings(record=True) as said, torch.autograd.detect_anomaly(check_nan=False):
        warnings.simplefilter("always")
        try:
            runpy.run_path(path, run_name="__main__")
        except Exception as err:  # noqa: BLE001 - whatever the script raises is what we report
            failed = err
        else:
            print("no error")
            return 0
    full = os.path.abspath(path)
    forward = [str(w.message) for w in said if "Traceback of forward call" in str(w.message)]
    lines = [n for text in forward for n in _lines_of(text, full)]
    if lines:
        source = linecache.getline(full, lines[-1]).strip()
        print(f"anomaly mode names: {path}:{lines[-1]}  {source}")
    else:
        print("anomaly mode names: nothing (no backward node failed with a recorded forward)")
    where = [f for f in traceback.extract_tb(failed.__traceback__) if os.path.abspath(f.filename) == full]
    at = f" (at {path}:{where[-1].lineno})" if where else ""
    print(f"torch says{at}: {type(failed).__name__}: {str(failed).splitlines()[0][:160]}")
    return 1


def _lines_of(text: str, full: str) -> list[int]:
    """The line numbers of `full`'s frames in a traceback's text."""
    found = []
    for part in text.split('File "')[1:]:
        name, _, rest = part.partition('", line ')
        if os.path.abspath(name) == full:
            found.append(int(rest.split(",")[0]))
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
