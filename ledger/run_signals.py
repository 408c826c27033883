"""Signals sent to ``hookledger run`` while its agent runs: each reaches the agent once.

The agent runs in hookledger's process group, so it stays in the terminal's foreground
group with hookledger (it may read the terminal; Ctrl+Z stops both), and a signal to
the whole group from a supervisor (``kill -KILL -<pgid>``) ends the agent too rather
than leaving it running unrecorded. A signal the terminal sends (Ctrl+C -> SIGINT,
Ctrl+\\ -> SIGQUIT, a hangup -> SIGHUP) goes to that whole group, so the agent already
has it; one sent to hookledger's pid alone (``kill -INT <pid>``, a supervisor's SIGTERM)
reaches only hookledger. :func:`passing_on` passes a signal on unless the agent already
got it, so an agent that handles Ctrl+C (Claude Code cancels the turn on the first one
and exits on a second) sees one Ctrl+C, not two.

Who sent a signal is read from its ``si_code`` (:func:`signal.sigtimedwait`; above 0:
the kernel, i.e. the terminal; 0 or below: a process, ``kill``/``sigqueue``): the
signals are blocked and a thread waits for them. That needs the calling thread to be
the process's only one (``hookledger run`` is; another thread would take the signal
while the main thread, blocked reading the agent's output, never ran its handler).
Otherwise (or without ``sigtimedwait``: macOS) a handler guesses: SIGINT and SIGQUIT
(the keys) count as the terminal's when hookledger's group is the foreground group of
its controlling terminal; SIGTERM and SIGHUP are always passed on.

What cannot be told apart: a process's signal to the whole group and one to
hookledger alone carry the same ``si_code`` (``SI_USER``) and sender, so a process's
``kill -INT -<pgid>`` reaches the agent twice (giving the agent a group of its own
would make it once, but a ``kill -KILL -<pgid>``, which cannot be passed on, would
then leave the agent running).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
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
    ``by_terminal``: whether the terminal sent that one to the agent's process group,
    the agent's as well as hookledger's (so hookledger did not pass it on);
    ``interrupts``: how many SIGINTs (Ctrl+C), whether passed on or sent by the
    terminal to the agent too.
    """

    terminating: int | None = None
    by_terminal: bool = False
    interrupts: int = 0


class Relay:
    """What :func:`passing_on` yields: ``received`` (what reached the agent so far, a
    :class:`Received` updated as signals arrive) and :meth:`agent_ended`."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.received = Received()
        self._proc = proc
        self._ended = False
        self._waiter: threading.Thread | None = None
        self._stop = threading.Event()

    def agent_ended(self) -> Received:
        """Stop passing signals on, once the agent has been waited for, and return what
        reached it: every signal sent until now is counted (one still on its way to the
        waiting thread too). The ones sent later reach no agent: until the block ends
        they are caught and dropped, so nothing interrupts recording the run's end."""
        if self._waiter is not None:
            self._stop_waiting()
            while (info := signal.sigtimedwait(PASSED_ON, 0)) is not None:
                self._deliver(info.si_signo, info.si_code > 0)  # > 0: sent by the kernel
        self._ended = True
        return dataclasses.replace(self.received)

    # -- internals -----------------------------------------------------------------

    def _deliver(self, signum: int, from_terminal: bool) -> None:
        if self._ended:
            return  # the agent has ended: nothing to pass on, nothing it received
        received = self.received
        first = signum != signal.SIGINT and received.terminating is None
        if signum == signal.SIGINT:
            received.interrupts += 1
        elif first:
            received.terminating = signum
        if from_terminal and _in_our_group(self._proc.pid):
            if first:
                received.by_terminal = True
            return  # the terminal sent it to the agent too
        _pass_on(self._proc, signum)

    def _handler(self, signum: int, _frame: object) -> None:
        self._deliver(signum, signum in _KEYS and _foreground())

    def _wait(self) -> None:
        while not self._stop.is_set():
            info = signal.sigtimedwait(PASSED_ON, _WAIT_S)
            if info is not None:
                self._deliver(info.si_signo, info.si_code > 0)  # > 0: sent by the kernel

    def _start_waiting(self) -> None:
        self._waiter = threading.Thread(target=self._wait, name="hookledger-run-signals",
                                        daemon=True)
        self._waiter.start()

    def _stop_waiting(self) -> None:
        if self._waiter is not None:
            self._stop.set()
            self._waiter.join()
            self._waiter = None


@contextlib.contextmanager
def passing_on(proc: subprocess.Popen[bytes]) -> Iterator[Relay]:
    """Pass the :data:`PASSED_ON` signals sent to this process on to ``proc`` (each
    once) until the block ends or :meth:`Relay.agent_ended`, and count what reached it
    in the yielded :class:`Relay`'s ``received``. No ``KeyboardInterrupt`` is raised
    meanwhile (nor does SIGTERM or SIGHUP end this process); the previous handlers and
    signal mask are restored at the end.

    Only the main thread may install signal handlers: called from another thread,
    nothing is caught or passed on (``received`` stays empty)."""
    relay = Relay(proc)
    if threading.current_thread() is not threading.main_thread():
        yield relay
        return
    previous = {sig: signal.signal(sig, relay._handler) for sig in PASSED_ON}
    mask: set[signal.Signals] | None = None
    if hasattr(signal, "sigtimedwait") and _only_thread():
        # Blocked here, a signal waits for the thread below, which reads its sender.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
        relay._start_waiting()
    try:
        yield relay
    finally:
        relay._stop_waiting()
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending one goes to the handler
        for sig, old in previous.items():
            signal.signal(sig, old)


def _pass_on(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the agent (unless it was waited for already)."""
    proc.poll()
    if proc.returncode is not None:
        return  # waited for: its pid may be another process's by now
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signum)


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
