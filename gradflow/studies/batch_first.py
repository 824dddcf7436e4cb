"""`gradflow batch --jobs N`'s first worker (batch_pool.py): the fork server imports torch (~1-1.5 s) before it
can fork one. The main thread spawns the fork server as soon as the first chunk is read (a thread that spawned
it waited 20-450 ms for the GIL first), and a thread starts the worker: it is ready once the fork server has
preloaded. Meanwhile the main thread reads ahead and another thread compiles (batch_ahead.py); the worker is
handed over to the main loop, or killed if the batch has ended meanwhile, never both or neither."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from gradflow.studies.batch_slots import Worker, kill
from gradflow.studies.batch_worker import main_not_rerun


class FirstWorker:
    def __init__(self, launch: Callable[[], Worker], stopping: threading.Event, done: Callable[[], None]):
        """`launch` starts a worker, `stopping` says the batch has ended, `done` runs in the starter thread once
        the worker is there (or has failed): the compiling stops and the main thread wakes up."""
        self.launch, self.stopping, self.done = launch, stopping, done
        self.begun = False
        self.started: queue.SimpleQueue = queue.SimpleQueue()  # the worker, or the error that stopped it
        self.handover = threading.Lock()

    def begin(self) -> None:
        """The fork server spawned now, by this (the main) thread, and the worker started by a thread."""
        from multiprocessing import forkserver

        self.begun = True
        with main_not_rerun():
            forkserver.ensure_running()
        threading.Thread(target=self._start, daemon=True, name="gradflow-batch-starter").start()

    def _start(self) -> None:
        try:
            got: Worker | BaseException = self.launch()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there
            got = exc
        with self.handover:
            if self.stopping.is_set() and isinstance(got, Worker):
                kill([got])  # the batch ended meanwhile
            else:
                self.started.put(got)
        self.done()

    def ready(self) -> Worker | None:
        """The worker, if the starter thread has handed it over (raises the error that stopped it)."""
        try:
            got = self.started.get_nowait()
        except queue.Empty:
            return None
        if isinstance(got, BaseException):
            raise got
        return got

    def left(self) -> list[Worker]:
        """At the batch's end (`stopping` set): a worker handed over but not taken (the starter kills a later one)."""
        got = []
        with self.handover:
            while not self.started.empty():
                got.append(self.started.get())
        return [w for w in got if isinstance(w, Worker)]
