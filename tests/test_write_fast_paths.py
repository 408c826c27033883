"""The write path's shortcuts build what the generic eventsourcing / pydantic path
builds, object for object, on every fact of the bundled transcripts:

* ``Session._append`` (the model's validator, no ``mutate`` checks) against
  ``cls(**fields)`` + ``event.mutate(aggregate)``;
* ``stored_bytes`` (one join) against the concatenating form it replaced;
* ``new_stored_event`` and ``LedgerEventStore.put`` against the dataclass
  constructors and ``EventStore.put``;
* ``Ledger.save`` against ``Application.save`` (rows, recordings, aggregate state).

``tests/test_stored_rows_golden.py`` pins the resulting rows byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import EventStore, StoredEvent

from api.bootstrap import build
from ledger.app import Ledger
from ledger.config import Settings
from ledger.envelope import RAW_SEPARATOR, Redaction, _json_default, seal, stored_bytes
from ledger.event_store import LedgerEventStore
from ledger.mapper import OrjsonTranscoder, PydanticMapper, new_stored_event
from ledger.observation import Observation
from ledger.parsing import parse_file
from ledger.session import Session

from conftest import FIXTURES

NOW = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
TRANSCRIPTS = sorted(FIXTURES.rglob("*.jsonl"))


def _reference_append(
    self: Session,
    cls: type[Session.Event],
    obs: Observation,
    *,
    key: str,
    status: Any,
    batch: int,
    raw: Any,
    data: dict[str, Any],
    alias_keys: tuple[str, ...] = (),
    record_key: str | None = None,
) -> None:
    """``Session._append`` as it was before its shortcuts (commit 126d082), with the
    ``record_key`` parameter it gained since (a derived event names its cause)."""
    if raw is not None and not isinstance(raw, str):
        raw = raw.strip().decode("utf-8") if isinstance(raw, bytes) else orjson.dumps(raw).decode()
    event = cls(
        originator_id=self.id,
        originator_version=self.version + 1,
        timestamp=self._now,
        event_key=key,
        alias_keys=alias_keys,
        agent=obs.session.agent,
        source_format=obs.source_format,
        source_version=obs.source_version,
        occurred_at=obs.occurred_at,
        raw=raw,
        record_key=record_key or obs.record_key,
        redactions=tuple(Redaction.model_validate(r) for r in obs.redactions)
        if key == obs.key
        else (),
        status=status,
        batch=batch,
        **data,
    )
    event = seal(self.head_digest, event)
    event.mutate(self)
    self.pending_events.append(event)


def _reference_stored_bytes(event: Any) -> bytes:
    """``stored_bytes`` as it was before the one-join form (commit 126d082)."""
    state = dict(event.__dict__)
    version = type(event).class_version
    if version > 1:
        state["class_version"] = version
    raw = state.get("raw")
    tail = b""
    if isinstance(raw, str):
        try:
            tail = RAW_SEPARATOR + raw.encode("utf-8")
            del state["raw"]
        except UnicodeEncodeError:
            tail = b""
    return orjson.dumps(state, default=_json_default, option=orjson.OPT_UTC_Z) + tail


def _sessions(observations: list[Observation]) -> dict[Any, Session]:
    """Every session of ``observations``, each fact observed in order (one microsecond
    later than the one before)."""
    sessions: dict[Any, Session] = {}
    for i, obs in enumerate(observations):
        now = NOW + timedelta(microseconds=i)
        agg = sessions.get(obs.session.id)
        if agg is None:
            agg = sessions[obs.session.id] = Session.open(obs, now)
        agg.observe(obs, now)
    return sessions


def _state(agg: Session) -> dict[str, Any]:
    return {k: v for k, v in vars(agg).items() if k not in ("_pending_events", "liveness")}


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_append_builds_the_events_of_the_generic_path(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def observations() -> list[Observation]:
        return [o for o in parse_file(path) if isinstance(o, Observation)]

    fast = _sessions(observations())
    with monkeypatch.context() as m:
        m.setattr(Session, "_append", _reference_append)
        reference = _sessions(observations())
    assert fast.keys() == reference.keys()
    for sid, agg in fast.items():
        ref = reference[sid]
        assert (agg.version, agg.modified_on, _state(agg)) == (
            ref.version,
            ref.modified_on,
            _state(ref),
        )
        assert vars(agg.liveness) == vars(ref.liveness)
        assert len(agg.pending_events) == len(ref.pending_events) == agg.version
        for got, want in zip(agg.pending_events, ref.pending_events, strict=True):
            assert type(got) is type(want)
            assert got.__dict__ == want.__dict__
            assert got.model_fields_set == want.model_fields_set
            assert stored_bytes(got) == _reference_stored_bytes(want)


def test_stored_events_and_recordings_equal_the_library_ones() -> None:
    observations = [o for p in TRANSCRIPTS[:3] for o in parse_file(p) if isinstance(o, Observation)]
    events = [e for agg in _sessions(observations).values() for e in agg.pending_events]
    assert len(events) > 100
    mapper = PydanticMapper(transcoder=OrjsonTranscoder())
    for event in events:
        got = mapper.to_stored_event(event)
        want = StoredEvent(
            originator_id=event.originator_id,
            originator_version=event.originator_version,
            topic=f"ledger.session:Session.{type(event).__name__}",
            state=_reference_stored_bytes(event),
        )
        assert (type(got), got, vars(got)) == (StoredEvent, want, vars(want))
        assert new_stored_event(*vars(want).values()) == want

    class Recorder:
        """Hands out notification ids as an application recorder would."""

        def __init__(self) -> None:
            self.inserted: list[Sequence[StoredEvent]] = []

        def insert_events(self, stored: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
            self.inserted.append(stored)
            return list(range(7, 7 + len(stored)))

    fast_recorder, library_recorder = Recorder(), Recorder()
    fast = LedgerEventStore(mapper, fast_recorder).put(events)  # type: ignore[arg-type]
    library = EventStore(mapper, library_recorder).put(events)  # type: ignore[arg-type]
    assert fast_recorder.inserted == library_recorder.inserted
    assert fast == library
    for got, want in zip(fast, library, strict=True):
        assert type(got.notification) is type(want.notification)
        assert vars(got.notification) == vars(want.notification)
        assert got.domain_event is want.domain_event


def test_ledger_save_equals_the_library_save(tmp_path: Path) -> None:
    observations = [o for o in parse_file(TRANSCRIPTS[0]) if isinstance(o, Observation)]
    results = []
    for name, save in (("fast", Ledger.save), ("library", Application.save)):
        services = build(Settings(tmp_path / name))
        try:
            aggregates = list(_sessions(observations).values())
            pending = [list(a.pending_events) for a in aggregates]
            recordings = save(services.ledger, *aggregates)
            assert [a.pending_events for a in aggregates] == [[] for _ in aggregates]
            assert [r.domain_event for r in recordings] == [e for p in pending for e in p]
            for agg in aggregates:  # what was saved loads back as the same stream
                loaded = services.ledger.session(agg.id)
                assert loaded is not None
                assert (loaded.version, loaded.head_digest) == (agg.version, agg.head_digest)
            rows = services.ledger.recorder.select_notifications(start=1, limit=100_000)
            results.append(([vars(r.notification) for r in recordings], [vars(n) for n in rows]))
        finally:
            services.close()
    assert results[0] == results[1]
    assert results[0][1]  # something was saved


def test_ledger_save_of_anything_but_aggregates_is_the_library_save(tmp_path: Path) -> None:
    services = build(Settings(tmp_path))
    try:
        assert services.ledger.save(None) == []
    finally:
        services.close()
