"""Imported by the fork server of `batch --jobs N` (batch_pool.py) before it forks any worker: the first-record
work every worker would otherwise repeat is done once, and shared by the workers' copy-on-write memory.

- the modules that evaluating and reporting a record imports lazily (engine, analysis, values);
- lark's parse tables, loaded into a parser (~10-50 ms a process), by compiling one program, and the fast parser
  (language/fastparse.py, ~2 ms) by compiling a second one (the first loads the node classes it waits for);
- gc.freeze() last (it is the last module preloaded): the fork server's ~10^6 objects (torch's) move out of the
  collector's reach, so a worker's collections neither walk them nor write to their pages (which would copy
  them all, page by page, into every worker: the Python docs' advice for gc.freeze before fork); then the
  collector, off since batch_cold (the first module preloaded), is turned back on for the workers.

No torch operation runs here: a fork server that had run one could hand its workers a half-made thread pool
(batch_pool.py says why). Importing torch (the preload list's first module) creates no pool.
"""
from __future__ import annotations

import gc

import gradflow.analysis.explanation
import gradflow.analysis.flows
import gradflow.engine.evaluate
import gradflow.engine.nonfinite
import gradflow.engine.torch_errors
import gradflow.values.coerce
import gradflow.values.jsonable
import gradflow.values.tensors
import gradflow.values.text  # noqa: F401 - imported for their side effect: loaded before the fork
from gradflow.language.compile import compile_program

compile_program("sum(tanh(x*y) + sigmoid(x)^2 - exp(detach(x))/2 + mean(w@w))")
compile_program("x*y - detach(x)")
gc.freeze()
gc.enable()
