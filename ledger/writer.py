"""Group commit: one writer thread records many hook bodies per :meth:`Ledger.record`.

Each ``POST /v1/hooks/{agent}`` parses its body and awaits :meth:`GroupWriter.answer`;
each journal chunk calls :meth:`GroupWriter.submit`, which returns a future. The
writer takes everything queued (up to ``max_items``), records it with ONE
``Ledger.record`` call (one transaction per call once the ledger saves all sessions
together) and answers each submitter with its own share of the result: the log
positions of the events whose idempotency key came from its items, or that the
aggregate derived from one of them (``RecordResult.causes``: a ``Reopened``, a
``ToolCallStarted`` for a completion whose start it never saw); ``Opened`` goes to the
first submitter that touched its stream. Duplicates count per submitter.

Submissions awaited on an event loop are answered with one
``call_soon_threadsafe`` per loop and group, not one per submission (each is a write to
the loop's wake-up pipe).

If a grouped call raises, each submission is recorded again on its own, so one bad
submission never fails the others (observations are idempotent, nothing doubles).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from uuid import UUID

from ledger.app import Ledger, RecordResult
from ledger.observation import Observation, Rejected

Item = Observation | Rejected


@dataclass
class _Submission:
    items: Sequence[Item]
    future: Future[RecordResult] | asyncio.Future[RecordResult] = field(default_factory=Future)
    loop: asyncio.AbstractEventLoop | None = None
    """Set when ``future`` is an asyncio future of this loop."""


Outcome = tuple[_Submission, RecordResult | None, BaseException | None]


class GroupWriter:
    """A thread that records queued submissions in groups (see the module docstring).

    Args:
        ledger: the single :class:`Ledger` of this process.
        max_items: most items (observations + rejected inputs) per ``record`` call.
    """

    def __init__(self, ledger: Ledger, max_items: int = 5000) -> None:
        self.ledger = ledger
        self.max_items = max_items
        self._queue: queue.SimpleQueue[_Submission | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="hookledger-writer", daemon=True)
        self._started = False
        self._gate = threading.Lock()
        """Held while checking ``_started`` and queueing, and while ``close`` puts the
        stop sentinel: nothing is queued behind the sentinel, where no one would answer
        it."""
        self.groups = 0
        self.submissions = 0

    def start(self) -> None:
        with self._gate:
            if not self._started:
                self._started = True
                self._thread.start()

    def close(self) -> None:
        """Finish what is queued, then stop the thread. A submission that arrives from
        now on is recorded in its caller's thread (the ledger's write lock orders it)."""
        with self._gate:
            if not self._started:
                return
            self._started = False
            self._queue.put(None)
        self._thread.join()

    def _enqueue(self, sub: _Submission) -> bool:
        """Queue ``sub`` for the writer thread; False when it is not running."""
        with self._gate:
            if self._started:
                self._queue.put(sub)
                return True
        return False

    def submit(self, items: Sequence[Item]) -> Future[RecordResult]:
        """Queue ``items`` (one hook body's worth); the future gives this submission's
        :class:`RecordResult` or the exception recording raised."""
        sub = _Submission(items)
        if not self._enqueue(sub):
            _settle([self._alone(sub)])
        return sub.future

    async def answer(self, items: Sequence[Item]) -> RecordResult:
        """``submit`` from a coroutine: this submission's :class:`RecordResult`, or the
        exception recording raised. Cheaper than ``asyncio.wrap_future(submit(...))``:
        the writer answers a group's submissions of one loop with a single wake-up."""
        loop = asyncio.get_running_loop()
        sub = _Submission(items, loop.create_future(), loop)
        if not self._enqueue(sub):
            _settle([self._alone(sub)])  # on its own loop's thread: set it directly
        return await sub.future

    def record(self, items: Sequence[Item]) -> RecordResult:
        """``submit`` and wait."""
        return self.submit(items).result()

    # -- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            size = len(first.items)
            stop = False
            while size < self.max_items:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
                size += len(nxt.items)
            self._record_group(group)
            if stop:
                return

    def _record_group(self, group: list[_Submission]) -> None:
        self.groups += 1
        self.submissions += len(group)
        if len(group) == 1:
            self._deliver([self._alone(group[0])])
            return
        try:
            result = self.ledger.record([i for sub in group for i in sub.items])
            shares = self._split(group, result)
        except Exception:
            self._deliver([self._alone(sub) for sub in group])
            return
        self._deliver([(sub, share, None) for sub, share in zip(group, shares, strict=True)])

    def _alone(self, sub: _Submission) -> Outcome:
        try:
            return sub, self.ledger.record(sub.items), None
        except Exception as e:
            return sub, None, e

    @staticmethod
    def _deliver(outcomes: list[Outcome]) -> None:
        """Set each submission's future, from the writer thread: directly for
        ``submit``'s futures, through one ``call_soon_threadsafe`` per event loop for
        ``answer``'s."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for outcome in outcomes:
            sub = outcome[0]
            if sub.loop is None:
                _settle([outcome])
            else:
                by_loop.setdefault(sub.loop, []).append(outcome)
        for loop, answers in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits
                loop.call_soon_threadsafe(_settle, answers)

    def _split(self, group: list[_Submission], result: RecordResult) -> list[RecordResult]:
        """Each submission's share of one grouped result, by the idempotency keys of the
        appended events (``RecordResult.appended_keys``)."""
        shares = [RecordResult() for _ in group]
        owner_of_key: dict[str, int] = {}
        owner_of_stream: dict[UUID, int] = {}
        owned_keys: list[set[str]] = [set() for _ in group]
        for n, sub in enumerate(group):
            for item in sub.items:
                owner_of_key.setdefault(item.key, n)
                if isinstance(item, Observation):
                    sid = item.session.id
                    owner_of_stream.setdefault(sid, n)
                    if sid not in shares[n].sessions:
                        shares[n].sessions.append(sid)
                else:
                    shares[n].rejected += 1
        causes = result.causes
        for position, key, stream in result.appended_keys:
            n = owner_of_key.get(key)
            if n is None and key in causes:  # derived from a submitter's observation
                n = owner_of_key.get(causes[key])
            if n is None:
                n = owner_of_stream.get(stream, 0)
            shares[n].positions.append(position)
            shares[n].appended_keys.append((position, key, stream))
            owned_keys[n].add(key)
        for n, sub in enumerate(group):
            share = shares[n]
            share.appended = len(share.positions)
            keys = owned_keys[n]
            share.duplicates = sum(
                1 for i in sub.items if isinstance(i, Observation) and i.key not in keys
            )
        return shares


def _settle(outcomes: list[Outcome]) -> None:
    """Set each future (one its waiter has cancelled stays cancelled)."""
    for sub, result, error in outcomes:
        if sub.future.done():
            continue
        if isinstance(error, StopIteration):  # an asyncio future refuses it (TypeError)
            error = RuntimeError(f"recording raised {error!r}")
        if error is not None:
            sub.future.set_exception(error)
        else:
            sub.future.set_result(result)  # type: ignore[arg-type]
