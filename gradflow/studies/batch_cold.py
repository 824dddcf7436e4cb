"""Imported first by the fork server of `batch --jobs N` (batch_pool.py), before torch:

- the collector is off while the preload imports build their ~10^6 long-lived objects (torch's), as the
  command's own start-up does (cli/startup.py). With it on, `import torch` ran ~0.1-0.2 s longer (full
  collections over what it had built so far) and the first gradflow module imported after it paid one more
  (~0.1 s). batch_warm, the last module preloaded, freezes them all and turns the collector back on, so the
  workers forked after it collect as usual;
- SIGINT is ignored: a terminal's Ctrl-C reaches the whole process group, and the fork server, still importing
  torch in the batch's first second, died in that import with a KeyboardInterrupt traceback on stderr. The
  command handles Ctrl-C (it kills the workers); the fork server ends once the command has gone. (After its
  preload, multiprocessing ignores SIGINT in the fork server anyway, and its workers ignore it: batch_worker.)
- at exit it ends at once (os._exit, without the interpreter's teardown). multiprocessing's fork server exits
  once the command has gone, and tearing down torch's modules took it ~0.2 s more, while it still held the
  command's stdout and stderr: a reader of the batch's output (`| jq`) waited that long for its end after the
  command had exited. (Its workers end by os._exit already: multiprocessing's own.)
"""
from __future__ import annotations

import atexit
import gc
import os
import signal

gc.disable()
signal.signal(signal.SIGINT, signal.SIG_IGN)
atexit.register(os._exit, 0)
