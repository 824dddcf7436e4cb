"""`gradflow batch`: many programs, one JSON record per input line, in input order (torch-free until the first
line is evaluated).

- lines.py: reading the input, a stream's bytes into numbered text lines, and a line into a Job
- records.py: a line's record (its answer or its error record) and the record as one JSON line
- run.py: run_batch (the records, in this process), and the check that command-line values are used
- pool.py: records_out, the records in this process or, for `--jobs N`, in N worker processes (the command
  side: chunks of lines out, records back in input order)
- chunks.py: the pool's bookkeeping: chunks of lines, the workers, what a dead worker's chunk becomes
- worker.py: what a worker process runs, and how workers start
"""
from __future__ import annotations

from gradflow.batch.run import run_batch

__all__ = ["run_batch"]
