"""Projections in their own process, so ingest and projection use both cores.

CPython runs one thread at a time per process. In ``hookledger serve`` the projections
(about half the CPU per event, see docs/benchmarks.md) would otherwise share that lock
with the HTTP handlers, the group writer and the SSE fan-out. :class:`ProjectionProcess`
starts a child process (``multiprocessing`` "spawn") that builds its own services from
the same :class:`~ledger.config.Settings` (the composition root, :func:`api.bootstrap.build`)
and runs ``ProjectionRunner.catch_up`` whenever it is woken.

* **Wake.** The parent's ledger listener writes one byte to a pipe after every save
  (non-blocking: a full pipe already means "wake up"); the child also looks every
  ``POLL_S`` (0.1 s) on its own, so appends by other processes (a CLI import) are
  projected too. When the parent closes the pipe, or dies (even by SIGKILL), the child
  reads end-of-file and exits after its current section. A child still starting
  (importing, opening the store) has no section to finish: :meth:`stop` ends it at
  once (SIGTERM), instead of waiting for that start (seconds on a busy machine at its
  lower priority: every server stopped soon after its start waited for it).
* **Waiting.** Installed as the parent runner's delegate, it turns every
  ``runner.catch_up(stop)`` of the parent (read-your-writes before a read, the SSE
  derived section, jobs, commands) into: wake the child, then poll the tracking table
  every ``WAIT_POLL_S`` (3 ms) until every projection has reached ``stop`` (default: the
  head of the log at the call). Nothing is applied twice: only the child applies.
* **Priority.** The child runs ``NICE`` (10) steps nicer than the server.
* **Failure.** When the child is not running, or the projections make no progress for
  ``STALL_S`` (1 s) while behind, the delegate declines and the parent catches up
  itself (exactly once either way: the runner's conditional tracking update), so a
  projection error surfaces in the parent as before. :meth:`ensure_running` (called by
  the server's background thread) starts a child that died again: at once the first
  time, then, while children keep dying within ``HEALTHY_S`` (60 s) of their start,
  after ``RESTART_DELAY_S`` doubled per failure up to ``RESTART_MAX_S`` (a child that
  cannot start, e.g. its data directory was removed, no longer costs a process start
  every 0.1 s, forever).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import Synchronized, SynchronizedString

from api.bootstrap import Services
from ledger.config import Settings

POLL_S = 0.1
WAIT_POLL_S = 0.003
STALL_S = 1.0
STOP_TIMEOUT_S = 30.0
RESTART_DELAY_S = 0.5
RESTART_MAX_S = 60.0
HEALTHY_S = 60.0
NICE = 10
"""Added to the child's niceness: on a busy machine the scheduler favours the server
(ingest, SSE fan-out: latency-bound) over the projections (eventually consistent; a
read that needs them current waits, and takes over after ``STALL_S``). Measured on 2
cores, 500 SSE clients: p99 34.3-34.6 ms at niceness 0, 29.3-34.3 ms over four runs at
+10 (docs/benchmarks.md)."""

STARTING, RUNNING, STOPPING = 0, 1, 2
"""The child's ``state`` (a shared int, changed under its lock): the child sets RUNNING
once it has opened the store, the parent's :meth:`ProjectionProcess.stop` sets STOPPING
and ends a child it found STARTING at once."""

log = logging.getLogger(__name__)


ERROR_BYTES = 1024
"""Room for the child's last catch-up error, shared with the parent (UTF-8, cut)."""


def _child(
    settings: Settings, wake: Connection, state: Synchronized[int], error: SynchronizedString
) -> None:
    """The child process: catch up on every wake (and every ``POLL_S``) until the
    parent's end of ``wake`` is closed. While catch-ups fail, ``error`` holds the last
    failure (``repr``), for ``/healthz``; empty once one succeeds."""
    from api.bootstrap import build

    # Ctrl-C in a terminal signals the whole process group: the server stops the child
    # itself (end of file on ``wake``), after its current section. Usually SIGINT is
    # ignored from the child's start already (:func:`_sigint_ignored`).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "nice"):  # not on Windows
        os.nice(NICE)
    services = build(settings)
    with state.get_lock():
        stopping = state.value == STOPPING  # the parent is ending us
        if not stopping:
            state.value = RUNNING
    if stopping:
        services.close()
        return
    failing: str | None = None  # the error the last catch-up failed with
    try:
        while True:
            if wake.poll(POLL_S) and not os.read(wake.fileno(), 65536):
                return  # end of file: the parent stopped us, or died
            try:
                services.runner.catch_up()
            except Exception as e:  # the parent sees the stall and catches up itself
                # the traceback once per distinct error: retried every POLL_S, a database
                # that is down for a minute wrote 500 tracebacks
                if repr(e) != failing:
                    log.exception("projection process: catch-up failed; retrying")
                    error.value = repr(e).encode("utf-8", "replace")[: ERROR_BYTES - 1]
                failing = repr(e)
                time.sleep(POLL_S)
            else:
                if failing is not None:
                    log.warning("projection process: catch-up works again")
                    error.value = b""
                failing = None
    finally:
        services.close()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the child starts: it keeps that through ``exec`` (and Python
    keeps an ignored SIGINT ignored), so a Ctrl-C while it still imports cannot kill it
    with a ``KeyboardInterrupt`` traceback. Only the main thread may change a handler:
    started from another thread (a restart), the child ignores SIGINT once it runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class ProjectionProcess:
    """Runs the projections of ``services`` in a child process (module docstring).

    Use :meth:`start` (installs the delegate on ``services.runner``) and :meth:`stop`.
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self._ctx = multiprocessing.get_context("spawn")
        self._wake: Connection | None = None
        self._proc: SpawnProcess | None = None
        self._state: Synchronized[int] | None = None
        self._error: SynchronizedString | None = None
        self._stopped = False
        self.restarts = 0
        self._started_at = 0.0
        self._failures = 0  # children that died within HEALTHY_S of their start, in a row
        self._next_start = 0.0

    def start(self) -> None:
        self._spawn()
        self.services.ledger.add_listener(self._saved)
        self.services.runner.delegate = self.catch_up

    def _spawn(self) -> None:
        reader, writer = self._ctx.Pipe(duplex=False)
        os.set_blocking(writer.fileno(), False)
        self._state = self._ctx.Value("i", STARTING)
        self._error = self._ctx.Array("c", ERROR_BYTES)
        self._proc = self._ctx.Process(
            target=_child,
            args=(self.services.settings, reader, self._state, self._error),
            name="hookledger-projections",
            daemon=True,
        )
        with _sigint_ignored():
            self._proc.start()
        self._started_at = time.monotonic()
        reader.close()  # the child has its own copy
        old, self._wake = self._wake, writer
        if old is not None:
            old.close()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def health(self) -> dict[str, object]:
        """``{"pid", "alive", "restarts", "error"}`` for ``/healthz``; ``error``: what
        the child's catch-ups fail with while they fail (the projections are stuck at
        some event, or cannot reach their tables), else None."""
        pid = self._proc.pid if self._proc is not None else None
        failing = self._error.value.decode("utf-8", "replace") if self._error else ""
        return {"pid": pid, "alive": self.alive(), "restarts": self.restarts,
                "error": failing or None}

    def ensure_running(self) -> None:
        """Start the child again if it died (logged with its exit code), backing off
        while children keep dying soon after their start (module docstring)."""
        if self._proc is None or self._proc.is_alive() or self._stopped:
            return
        now = time.monotonic()
        if self._next_start == 0.0:  # just found dead
            self._failures = self._failures + 1 if now - self._started_at < HEALTHY_S else 0
            delay = 0.0 if self._failures <= 1 else min(
                RESTART_MAX_S, RESTART_DELAY_S * 2 ** (self._failures - 2)
            )
            self._next_start = now + delay
            log.error("projection process exited (code %s); starting it again%s",
                      self._proc.exitcode, f" in {delay:g} s" if delay else "")
        if now < self._next_start:
            return
        self._next_start = 0.0
        self.restarts += 1
        self._spawn()

    def stop(self) -> None:
        """Stop the child after its current section (its transactions are atomic)."""
        self.services.runner.delegate = None
        self._stopped = True
        if self._wake is not None:
            self._wake.close()  # the child reads end-of-file
        if self._proc is not None:
            if self._still_starting():  # nothing to finish: do not wait for its start
                self._proc.terminate()
            self._proc.join(STOP_TIMEOUT_S)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()

    def _still_starting(self) -> bool:
        """Mark the child STOPPING; True when it had not finished starting (it will not
        begin projecting now)."""
        state = self._state
        if state is None or not state.get_lock().acquire(timeout=1.0):
            return False  # held for microseconds: its holder died holding it
        try:
            starting = state.value == STARTING
            state.value = STOPPING
        finally:
            state.get_lock().release()
        return starting

    def _saved(self, _position: int) -> None:
        self._poke()

    def _poke(self) -> None:
        wake = self._wake
        if wake is None:
            return
        # a full pipe is already a wake-up; a closed one means we are stopping
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(wake.fileno(), b"w")

    def catch_up(self, stop: int | None) -> int | None:
        """Wait until the child has applied everything up to ``stop`` (default: the
        head now). Returns 0 (events applied by this call: none, the child applies), or
        None when the parent should catch up itself (child not running, or no progress
        for ``STALL_S`` seconds)."""
        runner = self.services.runner
        # the read models first: when the database is down their engine says so at
        # once, where the event store's pool retries for most of a minute
        positions = runner.positions()
        target = stop if stop is not None else self.services.ledger.max_position()
        progress_at = time.monotonic()
        seen = -1
        while True:
            reached = min(positions.values(), default=target)
            if reached >= target:
                return 0
            if not self.alive():
                return None
            now = time.monotonic()
            if reached > seen:
                seen, progress_at = reached, now
            elif now - progress_at > STALL_S:
                return None
            self._poke()
            time.sleep(WAIT_POLL_S)
            positions = runner.positions()
