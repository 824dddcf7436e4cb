"""What a batch keeps, out of the garbage collector's reach: in the `gradflow batch` command's process (`--jobs 1`)
and in its workers, never in a user's process (run_batch, the library, leaves the collector alone).

A batch keeps two kinds of objects for as long as it runs: torch's (~10^6, imported once) and the compiled graphs
of its programs (language/compile.py's cache, up to 64 MB: ~30 tracked objects for a graph of 6 nodes). Both end
up in the oldest generation, and CPython 3.11 collects it in full each time it has grown by a quarter since the
last full collection: with every program distinct, 10,000 records ran 4 full collections after torch was frozen
(45, 84, 123 and 164 ms, each walking every graph kept so far) and ~80 collections of the middle generation over
the graphs still young: ~0.55 s of a 7 s `--jobs 1 --brief` run (bench/README.md, "`batch --jobs N`").

So after the first record and then every `EVERY` records, the young generations are collected (a record's own
reference cycles are freed there, as they would have been) and everything left is frozen (`gc.freeze()`): torch,
the modules the first record loaded and the graphs cached since. A frozen object is still freed by reference
counting as soon as nothing refers to it (a graph the cache drops: graphs hold no reference cycles, tested);
only a reference cycle that became garbage after reaching the oldest generation stays (a record's objects reach
it only when alive during a collection of the middle generation, and records make few cycles).
"""
from __future__ import annotations

import gc

EVERY = 1000  # records between freezes: ~0.3 ms each (a young collection), against ~50 us a record saved


class Freezer:
    def __init__(self, every: int = EVERY):
        self.every, self.done = every, 0

    def record_done(self) -> None:
        self.done += 1
        if self.done == 1 or self.done % self.every == 0:
            gc.collect(1)
            gc.freeze()
