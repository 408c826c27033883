"""Group commit: one writer thread records many hook bodies per :meth:`Ledger.record`.

Each ``POST /v1/hooks/{agent}`` (and each journal chunk) parses its body in its own
thread, then :meth:`GroupWriter.submit` queues the items and returns a future. The
writer takes everything queued (up to ``max_items``), records it with ONE
``Ledger.record`` call (one transaction per call once the ledger saves all sessions
together) and answers each submitter with its own share of the result: the log
positions of the events whose idempotency key came from its items (an event the
aggregate derived, such as ``SessionOpened``, goes to the first submitter that
touched its stream). Duplicates count per submitter.

If a grouped call raises, each submission is recorded again on its own, so one bad
submission never fails the others (observations are idempotent, nothing doubles).
"""

from __future__ import annotations

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
    future: Future[RecordResult] = field(default_factory=Future)


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
        self.groups = 0
        self.submissions = 0

    def start(self) -> None:
        if not self._started:
            self._started = True
            self._thread.start()

    def close(self) -> None:
        """Finish what is queued, then stop the thread."""
        if self._started:
            self._queue.put(None)
            self._thread.join()
            self._started = False

    def submit(self, items: Sequence[Item]) -> Future[RecordResult]:
        """Queue ``items`` (one hook body's worth); the future gives this submission's
        :class:`RecordResult` or the exception recording raised."""
        sub = _Submission(items)
        if not self._started:
            self._answer_alone(sub)
        else:
            self._queue.put(sub)
        return sub.future

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
            self._answer_alone(group[0])
            return
        try:
            result = self.ledger.record([i for sub in group for i in sub.items])
            shares = self._split(group, result)
        except Exception:
            for sub in group:
                self._answer_alone(sub)
            return
        for sub, share in zip(group, shares, strict=True):
            sub.future.set_result(share)

    def _answer_alone(self, sub: _Submission) -> None:
        try:
            sub.future.set_result(self.ledger.record(sub.items))
        except Exception as e:
            sub.future.set_exception(e)

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
        for position, key, stream in result.appended_keys:
            n = owner_of_key.get(key)
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
