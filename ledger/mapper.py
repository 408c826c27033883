"""Pydantic mapper and orjson transcoder for eventsourcing 9.5.

The 9.5 wheel has no pydantic support (the documented example lives in the library's
repository, ``examples/aggregate7``). This mapper stores each event's canonical JSON
(:func:`ledger.envelope.stored_bytes`: the hash-chain input plus ``digest``) and
rebuilds events with ``model_validate``, applying ``upcast_vN_vN+1`` class-version
upcasters (which the example mapper lacks).
"""

from __future__ import annotations

from typing import Any

import orjson
from eventsourcing.persistence import (
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, resolve_topic

from ledger.envelope import RAW_SEPARATOR, stored_bytes


class OrjsonTranscoder(Transcoder):
    """JSON bytes via orjson. Only JSON-native values reach it (pydantic dumps first)."""

    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


def new_stored_event(
    originator_id: Any, originator_version: int, topic: str, state: bytes
) -> StoredEvent:
    """``StoredEvent(originator_id, originator_version, topic, state)``, an equal object
    built by setting its ``__dict__`` directly: the frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__`` (about twice the cost, per event)."""
    stored = object.__new__(StoredEvent)
    stored.__dict__.update(
        originator_id=originator_id,
        originator_version=originator_version,
        topic=topic,
        state=state,
    )
    return stored


class PydanticMapper(Mapper[Any]):
    """Maps pydantic domain events to :class:`StoredEvent` and back.

    Raises:
        MapperDeserialisationError: stored bytes are not valid JSON, or do not
            validate against the event class (e.g. a corrupted row).
    """

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        return new_stored_event(
            domain_event.originator_id,
            domain_event.originator_version,
            get_topic(type(domain_event)),
            stored_bytes(domain_event),
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        return self.decode(
            stored_event.topic,
            stored_event.state,
            stored_event.originator_id,
            stored_event.originator_version,
        )

    def stored_state(self, data: bytes, *, raw: bool = True) -> dict[str, Any]:
        """The JSON state of stored ``data`` as a dict, not validated (the raw record
        put back as ``raw`` unless ``raw=False``). Its values equal the event's
        ``model_dump(mode="json")``. Stored bytes are never compressed or encrypted
        (:class:`ledger.app.Ledger` refuses a store configured to)."""
        if not raw:  # only the JSON part is copied (a raw record may be megabytes)
            end = data.find(RAW_SEPARATOR)
            return self.transcoder.decode(data if end < 0 else data[:end])  # type: ignore[no-any-return]
        head, separator, tail = data.partition(RAW_SEPARATOR)
        state: dict[str, Any] = self.transcoder.decode(head)
        if separator:
            state["raw"] = tail.decode("utf-8")
        return state

    def decode(
        self,
        topic: str,
        data: bytes,
        originator_id: Any,
        originator_version: int,
        *,
        raw: bool = True,
    ) -> Any:
        """The domain event stored as ``data`` under ``topic`` (``originator_id``: a UUID
        or its hex string). With ``raw=False`` the event's ``raw`` record is left out
        (None), which is all a projection needs and much cheaper.

        Raises:
            MapperDeserialisationError: see the class docstring.
        """
        try:
            cls = resolve_topic(topic)
            state = self.stored_state(data, raw=raw)
            state.pop("kind", None)  # part of the canonical form, not a field
            state["originator_id"] = originator_id
            state["originator_version"] = originator_version
            class_version = getattr(cls, "class_version", 1)
            from_version = state.pop("class_version", 1)
            while from_version < class_version:
                getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
                from_version += 1
            return cls.model_validate(state)
        except Exception as e:
            msg = f"cannot decode stored event {originator_id} v{originator_version} ({topic}): {e}"
            raise MapperDeserialisationError(msg) from e
