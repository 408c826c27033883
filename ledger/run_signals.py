"""Signals sent to ``hookledger run`` while its agent runs: each reaches the agent once.

The agent runs in hookledger's process group. A signal the terminal sends (Ctrl+C ->
SIGINT, Ctrl+\\ -> SIGQUIT, a hangup -> SIGHUP) goes to the whole foreground group, so
the agent already has it; one sent to hookledger's pid alone (``kill -INT <pid>``, a
supervisor's SIGTERM) reaches only hookledger. :func:`passing_on` passes a signal on
unless the agent already got it, so an agent that handles Ctrl+C (Claude Code cancels
the turn on the first one and exits on a second) sees one Ctrl+C, not two.

Who sent a signal is read from its ``si_code`` (:func:`signal.sigtimedwait`; above 0:
the kernel, i.e. the terminal; 0 or below: a process, ``kill``/``sigqueue``): the
signals are blocked and a thread waits for them. That needs the calling thread to be
the process's only one (``hookledger run`` is; another thread would take the signal
while the main thread, blocked reading the agent's output, never ran its handler).
Otherwise (or without ``sigtimedwait``: macOS) a handler guesses: SIGINT and SIGQUIT
(the keys) count as the terminal's when hookledger's group is the foreground group of
its controlling terminal; SIGTERM and SIGHUP are always passed on. A signal a process
sends to the whole group (``kill -INT -<pgid>``) reaches the agent twice: it cannot be
told apart from one sent to hookledger alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals sent to ``hookledger run`` that reach the agent."""
_KEYS = (signal.SIGINT, signal.SIGQUIT)
"""The signals a terminal sends for a key (Ctrl+C, Ctrl+\\)."""
_WAIT_S = 0.05
"""How long the waiting thread sleeps between checks that the run ended (seconds)."""


@dataclass
class Received:
    """What reached the agent while :func:`passing_on` ran.

    ``terminating``: the number of the first SIGTERM, SIGHUP or SIGQUIT, else None;
    ``interrupts``: how many SIGINTs (Ctrl+C), whether passed on or sent by the
    terminal to the agent too.
    """

    terminating: int | None = None
    interrupts: int = 0


@contextlib.contextmanager
def passing_on(proc: subprocess.Popen[bytes]) -> Iterator[Received]:
    """Pass the :data:`PASSED_ON` signals sent to this process on to ``proc`` (each
    once) until the block ends, and count what reached it in the yielded
    :class:`Received`. No ``KeyboardInterrupt`` is raised meanwhile; the previous
    handlers and signal mask are restored at the end.

    Only the main thread may install signal handlers: called from another thread,
    nothing is caught or passed on (the ``Received`` stays empty)."""
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def deliver(signum: int, from_terminal: bool) -> None:
        if signum == signal.SIGINT:
            received.interrupts += 1
        elif received.terminating is None:
            received.terminating = signum
        if from_terminal and _in_our_group(proc.pid):
            return  # the terminal sent it to the agent too
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    def handler(signum: int, _frame: object) -> None:
        deliver(signum, signum in _KEYS and _foreground())

    previous = {sig: signal.signal(sig, handler) for sig in PASSED_ON}
    waiter: threading.Thread | None = None
    stop = threading.Event()
    mask: set[signal.Signals] = set()
    if hasattr(signal, "sigtimedwait") and _only_thread():
        # Blocked here, a signal waits for the thread below, which reads its sender.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
        waiter = threading.Thread(
            target=_wait, args=(deliver, stop), name="hookledger-run-signals", daemon=True
        )
        waiter.start()
    try:
        yield received
    finally:
        if waiter is not None:
            stop.set()
            waiter.join()
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending one goes to handler
        for sig, old in previous.items():
            signal.signal(sig, old)


def _wait(deliver: Callable[[int, bool], None], stop: threading.Event) -> None:
    while not stop.is_set():
        info = signal.sigtimedwait(PASSED_ON, _WAIT_S)
        if info is not None:
            deliver(info.si_signo, info.si_code > 0)  # > 0: sent by the kernel (terminal)


def _only_thread() -> bool:
    """Whether the calling thread is the process's only one (native threads included
    where ``/proc`` lists them)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _in_our_group(pid: int) -> bool:
    """Whether ``pid`` is in this process's group (True when it is gone: nothing to send)."""
    try:
        return os.getpgid(pid) == os.getpgrp()
    except ProcessLookupError:
        return True


def _foreground() -> bool:
    """Whether this process's group is the foreground group of its controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)
