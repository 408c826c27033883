"""One subscription to the notification log per process, fanned out to SSE clients.

The :class:`Broadcaster` reads the log after ``head`` whenever the ledger reports a
save in this process (``Ledger.add_listener``) and, as a fallback for writers in other
processes, every ``poll_s`` seconds. Each read becomes two sections (:class:`api.sections.Section`)
(built once, in worker threads: the ``event.appended`` messages at once, the derived
ones after the projections applied them) that are offered to every :class:`Subscriber`'s
bounded queue without waiting: a slow client never blocks the others or the ingest
path. When a subscriber's queue is full its queue is emptied and replaced by one
``RESYNC`` marker; the client then reads the log itself from the last position it
sent (see :func:`api.stream.messages`) and rejoins the live queue, so nothing is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

import anyio

from api.bootstrap import Services
from api.sections import DERIVED_KINDS, Identities, Section, derived_section, read_appended

log = logging.getLogger(__name__)

POLL_S = 0.5
"""Fallback log poll interval (s), for writers in other processes."""
STOP_WAIT_S = 30
"""How long :meth:`Broadcaster.stop` waits for the log read in progress."""
QUEUE_SECTIONS = 64
"""Sections a client may have waiting before it is switched to reading the log."""
LOG_READS = 2
"""Sections read from the log at once for clients catching up (each holds up to
``SECTION_LIMIT`` decoded events: with large payloads, tens of megabytes). More clients
catching up at once wait their turn instead of adding to the process's memory."""


class _Resync:
    def __repr__(self) -> str:
        return "RESYNC"


RESYNC: Final = _Resync()


class _Stop:
    def __repr__(self) -> str:
        return "STOP"


STOP: Final = _Stop()
"""The server is shutting down: the client's stream ends (it reconnects with the last
position it received, so nothing is lost)."""


class Subscriber:
    """One client's bounded queue of sections (or ``RESYNC``, or ``STOP``)."""

    def __init__(self, size: int, kinds: frozenset[str] | None = None) -> None:
        self.queue: asyncio.Queue[Section | _Resync | _Stop] = asyncio.Queue(size)
        self.kinds = kinds
        """Message kinds the client wants (None: all); other sections are not queued."""
        self.resyncing = False
        self.overflows = 0

    def stop(self) -> None:
        """End the client's stream at its next read: its queue holds only ``STOP``."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(STOP)
        self.resyncing = True  # nothing is queued after it

    def offer(self, section: Section, kinds: frozenset[str]) -> None:
        """Enqueue without waiting; on overflow switch the client to the log.
        ``kinds``: the section's message kinds."""
        if self.resyncing:
            return  # the client will read this section from the log
        if self.kinds is not None and self.kinds.isdisjoint(kinds):
            return  # nothing in it for this client: no wake-up
        try:
            self.queue.put_nowait(section)
        except asyncio.QueueFull:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESYNC)
            self.resyncing = True
            self.overflows += 1


class Broadcaster:
    """Reads the notification log once for all clients (start in the app's lifespan)."""

    def __init__(
        self, services: Services, *, poll_s: float = POLL_S, queue_sections: int = QUEUE_SECTIONS
    ) -> None:
        self.services = services
        self.poll_s = poll_s
        self.queue_sections = queue_sections
        self.head = 0
        """Last position offered to subscribers: every later section goes to the queues."""
        self.subscribers: set[Subscriber] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._known: Identities = {}
        self._saved_up_to = 0
        """Highest position this process saved while nobody was subscribed."""
        self.derived_built = 0
        """Derived sections built (only while a subscriber wants a derived kind)."""
        self.log_reads: anyio.CapacityLimiter | None = None
        """Threads that may read the log for resuming clients at once (set by start)."""

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.log_reads = anyio.CapacityLimiter(LOG_READS)
        self.head = await anyio.to_thread.run_sync(self.services.ledger.max_position)
        self._running = True
        self.services.ledger.add_listener(self._saved)
        self._task = asyncio.create_task(self._run(), name="hookledger-broadcaster")

    async def stop(self) -> None:
        """Stop after the log read in progress (never leaves a worker thread mid-read
        behind, so the store can be closed right after)."""
        self._running = False
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), STOP_WAIT_S)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscriber:
        """A new subscriber (of messages of ``kinds``, None: all); its first item is
        ``RESYNC`` (read the log up to ``head``)."""
        sub = Subscriber(self.queue_sections, kinds)
        sub.queue.put_nowait(RESYNC)
        sub.resyncing = True
        self.subscribers.add(sub)
        self._wake.set()  # saves made while nobody listened did not wake the pump
        return sub

    def rejoin(self, sub: Subscriber) -> int:
        """Put ``sub`` back on the live queue; returns the position up to which it must
        read the log first (sections after it arrive in the queue)."""
        sub.resyncing = False
        return self.head

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def _saved(self, position: int) -> None:
        """Ledger listener; runs in the saving thread, must never raise into it."""
        loop = self._loop
        if not self._running or loop is None or position <= self.head:
            return
        if not self.subscribers:  # nobody to send to: no wake-up, no log read
            self._saved_up_to = max(self._saved_up_to, position)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
            loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        while self._running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            self._wake.clear()
            if not self._running:
                return
            try:
                await self._pump()
            except Exception:  # keep broadcasting; the next wake retries from head
                log.exception("reading the notification log failed")
                await asyncio.sleep(self.poll_s)

    async def _pump(self) -> None:
        if not self.subscribers:
            # Nobody listens: skip what was saved meanwhile without building sections.
            # A client that subscribes later reads the log up to ``head`` itself, and
            # subscribing happens on this loop, so it can never fall between the check
            # and the assignment.
            self.head = max(self.head, self._saved_up_to)
            return
        while self._running:
            after = self.head
            found = await anyio.to_thread.run_sync(read_appended, self.services, after, self._known)
            if found is None:
                return
            appended, events = found
            self._publish(appended)
            if not self._derived_wanted():
                continue  # a client that later wants them reads them from the log
            derived = await anyio.to_thread.run_sync(derived_section, self.services, after, events)
            self.derived_built += 1
            self._publish(derived)

    def _derived_wanted(self) -> bool:
        """Whether any subscriber takes a derived kind (``session.updated``, ...)."""
        return any(
            s.kinds is None or not s.kinds.isdisjoint(DERIVED_KINDS) for s in self.subscribers
        )

    def _publish(self, section: Section) -> None:
        self.head = max(self.head, section.last)
        kinds = section.kinds
        for sub in list(self.subscribers):
            sub.offer(section, kinds)
