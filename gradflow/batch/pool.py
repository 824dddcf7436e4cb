"""`gradflow batch --jobs N`: the records of a batch made by N worker processes, yielded in input order (the
command side; what a worker runs is worker.py, the bookkeeping of chunks chunks.py).

Standard library only: `multiprocessing` with the *forkserver* context, one duplex Pipe per worker, and
`multiprocessing.connection.wait` over the pipes, the workers' sentinels and a wake-up pipe of the reader.

- **Reading**: a thread reads the input (lines.read_lines: a file, a pipe or stdin) into a bounded queue.
  The main thread cuts what has arrived into chunks of up to CHUNK consecutive lines and gives each chunk to an
  idle worker: one message per chunk each way, never one per record. A busy worker gets one chunk more
  (QUEUED), which waits in its pipe: it starts it as soon as it has sent its records, without a round trip
  through the command (which would leave it idle). A chunk is closed early only when a worker would otherwise
  wait, so a file goes in full chunks while a slow pipe is answered line by line.
- **Order and streaming**: chunks are kept in input order; a chunk's records are yielded as soon as it and every
  chunk before it are done. At most WINDOW_PER_JOB chunks per worker are read ahead (memory stays
  bounded, and a worker never waits for the reader of a file).
- **Workers**: forked from multiprocessing's fork server, which has imported torch and gradflow's engine once
  (`set_forkserver_preload`) but has run no torch operation: a worker never inherits a thread pool that fork
  would copy half-made (fork copies only the calling thread; a pool's other threads would be missing while its
  state says they exist). Each worker then calls torch.set_num_threads(1) before its first operation: N workers
  on N cores are already the parallelism, a batch's tensors are small, and torch's default of one intra-op thread
  per core would have N x N threads competing for N cores. The fork server, not the command, forks: the
  command's own reader thread may hold stdin's lock, and a child forked from it would inherit that lock taken.
  Workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group): the command stops them.
- **The first worker** waits for the fork server's preload (torch): the command spawns the fork server with
  SIGINT ignored, else Ctrl-C would kill it inside that import with a KeyboardInterrupt traceback (the command
  handles Ctrl-C, and the fork server ends once the command has gone).
- **Isolation**: a line that fails is an error record, as in one process (run_batch). A worker that dies (a
  segfault in torch, the OOM killer's SIGKILL) is replaced; its line in flight (each worker publishes the line it
  is on in shared memory) gets a `crashed` error record, and the rest of its chunk is run again elsewhere.
- **Stopping**: Ctrl-C, a reader gone (`| head`) or an error ends the generator: every worker is killed (they
  hold no state worth saving) before the exception goes on; the caller writes only whole records.

Why not multiprocessing.Pool or concurrent.futures.ProcessPoolExecutor: when a worker dies, Pool replaces it but
never returns its task (the batch would wait for ever), and ProcessPoolExecutor marks itself broken and fails
every pending task; neither says which record was in flight. Both also pickle one task per call unless
chunked, and then return a chunk only when all of it is done. The dispatch here is one loop (`records`),
in four steps.

`jobs <= 1`, or a daemonic process (which may not start any), runs in this process (records_out): exactly
run_batch, no threads, no workers.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from gradflow.batch.chunks import Chunk, Order, Worker, WorkerBug, crash_out, kill, split, startup_failed
from gradflow.batch.records import Out, error_record, out
from gradflow.batch.worker import forget_forkserver, main_not_rerun, stop_forkserver, work
from gradflow.errors import GradflowError

CHUNK = 32  # lines per message: enough work that a round trip per chunk is a small part of it
QUEUED = 1  # chunks a busy worker has waiting in its pipe: it starts the next one without a round trip
WINDOW_PER_JOB = 4  # chunks read ahead per worker
QUEUE_LINES = 4096  # lines the reader thread may hold before it waits
_PRELOAD = ["torch", "gradflow.batch.worker", "gradflow.batch.run", "gradflow.engine.explain"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. under taskset or a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def records_out(lines: Iterable[str | GradflowError], jobs: int, encode: Callable[[dict], str], *,
                first_line: int = 1, **options: Any) -> Generator[Out, None, None]:
    """(line, JSON text, error kind, source) per record of `run_batch(lines, first_line=first_line, **options)`,
    in input order, made by `jobs` worker processes (`jobs <= 1`, or a daemonic process: in this process, no
    threads, no workers). `encode` turns a record into its JSON line; with jobs > 1 it runs in the workers, so
    it must pickle (a module-level function, or a functools.partial of one), as must `options`."""
    if jobs <= 1 or _daemonic():
        from gradflow.batch.run import run_batch

        for rec in run_batch(lines, first_line=first_line, **options):
            yield out(rec, encode)
        return
    pool = Pool(jobs, encode, options)
    try:
        yield from pool.records(lines, first_line)
    finally:
        pool.close()


def _daemonic() -> bool:
    """This is a daemonic multiprocessing worker (a library user's Pool): it may not start processes of its own,
    so its batches run in it."""
    import multiprocessing

    return multiprocessing.current_process().daemon


_AT_FORK: list[bool] = []


class Pool:
    def __init__(self, jobs: int, encode: Callable[[dict], str], options: dict):
        import multiprocessing

        if not _AT_FORK:
            os.register_at_fork(after_in_child=forget_forkserver)
            _AT_FORK.append(True)
        _HARD_EXIT.clear()  # a batch earlier in this process (the library, a test runner) may have set it
        self.jobs, self.encode, self.options = jobs, encode, options
        self.ctx = multiprocessing.get_context("forkserver")
        module = getattr(getattr(encode, "func", encode), "__module__", None)  # the encoder's module, pre-imported
        self.ctx.set_forkserver_preload(_PRELOAD + ([module] if module else []))
        self.workers: list[Worker] = []
        self.wake_r, self.wake_w = os.pipe()
        self.lines: queue.Queue = queue.Queue(QUEUE_LINES)
        self.reader: threading.Thread | None = None
        self.stopping = threading.Event()
        self.fruitless = 0  # workers that died in a row without making a record (they cannot start)
        os.set_blocking(self.wake_w, False)  # a full pipe already says "wake up": the reader never waits on it
        self.room = 0  # bytes a message to a busy worker may have (_give): a quarter of its pipe's buffer

    # -- reading (a thread) --
    def _read(self, lines: Iterable[str | GradflowError], first: int) -> None:
        end: BaseException | None = None
        try:
            for item in enumerate(lines, first):
                self._put(item)
                if self.stopping.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, raised there in order
            end = exc
        self._put((None, end))

    def _put(self, item) -> None:
        while not self.stopping.is_set():
            try:
                self.lines.put(item, timeout=0.5)
                break
            except queue.Full:
                continue
        if self.lines.qsize() <= 1:  # else the main thread has yet to take a line put before, which woke it
            self._wake()

    # -- workers --
    def _launch(self) -> Worker:
        here, there = self.ctx.Pipe(duplex=True)
        current = self.ctx.RawValue("q", 0)
        proc = self.ctx.Process(target=work, args=(there, current, self.encode, self.options), daemon=True,
                                name="gradflow-batch-worker")
        with main_not_rerun():
            proc.start()
        there.close()
        if not self.room:
            import socket

            with socket.fromfd(here.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                self.room = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4
        return Worker(proc, here, current)

    def _start_worker(self) -> Worker:
        if not self.workers:
            _start_fork_server()
        worker = self._launch()
        self.workers.append(worker)
        return worker

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"\0")
        except OSError:  # full (a wake-up is pending anyway), or closed: the command is done
            pass

    def _give(self, worker: Worker, chunk: Chunk) -> bool:
        """Send a chunk to a worker; False if it cannot take it now. An idle worker waits in recv(), so the send
        never blocks for long. A busy one gets a chunk only if the message fits in its pipe's buffer with room to
        spare: the command must never wait on a busy worker, which may itself be waiting to send its records."""
        if chunk.message is None:
            from multiprocessing.reduction import ForkingPickler

            chunk.message = bytes(ForkingPickler.dumps((chunk.first, chunk.lines)))
        if worker.chunks and len(chunk.message) > self.room:
            return False
        worker.chunks.append(chunk)
        try:
            worker.conn.send_bytes(chunk.message)
        except OSError:  # it has just died: its sentinel says so next, and the chunk is run again
            pass
        return True

    def _crashed(self, worker: Worker) -> tuple[Chunk | None, list[Chunk], list[Chunk]]:
        """A worker died: its chunk in flight (None: it had none), what that chunk becomes (lines to run again,
        and the error record of the one in flight), and its chunks not started (to give to another)."""
        self.workers.remove(worker)
        worker.proc.join(5)
        worker.conn.close()
        if not worker.chunks:
            return None, [], []
        chunk, *waiting = worker.chunks
        worker.chunks.clear()
        return chunk, split(chunk, worker.current.value, lambda number, line: crash_out(
            number, line, worker.proc.exitcode, self.options.get("text", False), self.encode)), waiting

    def _error_out(self, number: int, error: GradflowError) -> Out:
        return out(error_record(number, number, None, error), self.encode)

    # -- the main loop: lines into chunks (1), chunks to workers (2), records out in order (3), then wait (4) --
    def records(self, lines: Iterable[str | GradflowError], first: int) -> Iterator[Out]:
        self.reader = threading.Thread(target=self._read, args=(lines, first), name="gradflow-batch-reader",
                                       daemon=True)
        self.reader.start()
        order = Order(first)
        window = WINDOW_PER_JOB * self.jobs
        while True:
            self._take(order, window)
            idle = [w for w in self.workers if not w.chunks]
            if order.building and (order.ended or not order.todo and (idle or len(self.workers) < self.jobs)):
                self._close(order)  # somebody would wait: do not wait for a full chunk
            self._hand_out(order, idle)
            yield from self._finished(order)
            if order.ended and not order.chunks and not order.building:
                if order.end_error is not None:
                    raise order.end_error
                return
            if not order.ended and len(order.chunks) < window and not self.lines.empty():
                continue  # lines wait for room just made: take them first
            self._wait(order)

    def _take(self, order: Order, window: int) -> None:
        """1. What the reader has read, into chunks (up to the window): full chunks, and a line that cannot be read
        as its own chunk, its error record made here."""
        while not order.ended and len(order.chunks) < window:
            try:
                number, item = self.lines.get_nowait()
            except queue.Empty:
                break
            if number is None:
                order.ended, order.end_error = True, item
            elif isinstance(item, GradflowError):
                if order.building:
                    self._close(order)
                order.chunks.append(Chunk(number, [], [self._error_out(number, item)]))
                order.first = number + 1
            else:
                if not order.building:
                    order.first = number
                order.building.append(item)
                if len(order.building) == CHUNK:
                    self._close(order)

    def _close(self, order: Order) -> None:
        """The lines read so far become a chunk."""
        chunk = Chunk(order.first, order.building)
        order.building = []
        order.chunks.append(chunk)
        order.todo.append(chunk)

    def _hand_out(self, order: Order, idle: list[Worker]) -> None:
        """2. Work to the workers, the idle first (starting them as there is work for them), then a chunk more
        to each busy one."""
        while order.todo:
            if not idle and len(self.workers) < self.jobs:
                idle.append(self._start_worker())
            worker = idle.pop() if idle else min(self.workers, key=lambda w: len(w.chunks), default=None)
            if worker is None or len(worker.chunks) > QUEUED or not self._give(worker, order.todo[0]):
                break
            order.todo.popleft()

    @staticmethod
    def _finished(order: Order) -> Iterator[Out]:
        """3. Records out, in order: those of the first chunk as they come, then the next once it is done."""
        chunks = order.chunks
        while chunks:
            head = chunks[0]
            if head.given < len(head.out):
                given, head.given = head.given, len(head.out)
                yield from head.out[given:]
            if not head.done:
                break
            chunks.popleft()

    def _wait(self, order: Order) -> None:
        """4. Wait for a worker's answer or death, or for more input; a dead worker's chunks are taken back
        (_hear), in their place."""
        from multiprocessing.connection import wait

        ready = set(wait([self.wake_r] + [w.conn for w in self.workers] + [w.proc.sentinel for w in self.workers]))
        if self.wake_r in ready:
            os.read(self.wake_r, 1 << 16)
        for worker in list(self.workers):
            if worker.conn in ready or worker.proc.sentinel in ready:
                dead, pieces, waiting = self._hear(worker)
                order.todo.extendleft(reversed(waiting))
                if dead is not None:
                    at = order.chunks.index(dead)  # identity: Chunk has no __eq__
                    del order.chunks[at]
                    for piece in reversed(pieces):
                        order.chunks.insert(at, piece)
                        if not piece.done:
                            order.todo.appendleft(piece)

    def _hear(self, worker: Worker) -> tuple[Chunk | None, list[Chunk], list[Chunk]]:
        """Read a worker's answers; if it has died, _crashed's account of its chunks (else None, [], [])."""
        try:
            while worker.conn.poll():
                kind, body = worker.conn.recv()
                if kind == "bug":
                    raise WorkerBug(f"a worker process failed:\n{body}")
                chunk = worker.chunks[0]
                chunk.out += body
                self.fruitless = 0
                if kind == "done":
                    chunk.done = True
                    worker.chunks.popleft()
            if worker.proc.is_alive():
                return None, [], []
        except (EOFError, OSError):
            pass
        dead, pieces, waiting = self._crashed(worker)
        if all(not piece.out for piece in pieces):  # nothing made, nothing in flight: it did no work
            self.fruitless += 1
            if self.fruitless > self.jobs + 2:
                raise startup_failed(self.jobs)
        return dead, pieces, waiting

    def close(self) -> None:
        """Stop everything: workers killed (Ctrl-C, a reader gone or the end), the reader told to stop. A reader
        still blocked on a pipe cannot be stopped: the process must then end without joining it (needs_hard_exit),
        so multiprocessing's exit work (removing its temporary folder) is done here, now."""
        self.stopping.set()
        kill(self.workers)
        self.workers.clear()
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.reader is not None and self.reader.is_alive():
            from multiprocessing import util

            _HARD_EXIT.append(True)
            util._run_finalizers()  # type: ignore[attr-defined]  # as at exit: its folder in /tmp goes
            stop_forkserver()  # its socket was in that folder: a later batch in this process starts a new one


_HARD_EXIT: list[bool] = []


def _start_fork_server() -> None:
    """multiprocessing's fork server, spawned (if not running yet) with SIGINT ignored: inherited through its exec,
    so Ctrl-C while it still imports torch leaves it quiet (the module's docstring says why)."""
    import signal
    import threading
    from multiprocessing import forkserver

    in_main = threading.current_thread() is threading.main_thread()  # signal handlers are the main thread's
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main else None
    try:
        with main_not_rerun():
            forkserver.ensure_running()
    finally:
        if in_main:
            signal.signal(signal.SIGINT, handler)


def end_of_command() -> None:
    """The `gradflow` process is about to exit (cli/streams.py): its fork server goes now (worker.stop_forkserver).
    A library's batches leave it running for the next batch in the process."""
    stop_forkserver()


def needs_hard_exit() -> bool:
    """A batch ended while its reader thread was still blocked on the input (`| head`, Ctrl-C, an error with a
    pipe still open): the interpreter's normal exit would wait on it or die on stdin's lock (daemon threads at
    shutdown); the command should end with os._exit once its output is flushed."""
    return bool(_HARD_EXIT)
