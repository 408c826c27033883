"""Decoding a stored event for the projections without validating it a second time.

Every row of the event store was written by :func:`ledger.envelope.stored_bytes`: the
fields of an event pydantic had already validated, dumped by orjson (tuples as arrays,
times as ISO-8601 with ``Z``, enums and UUIDs as their text). Reading such a row back
needs no validation, only the few conversions JSON cannot carry: times, UUIDs, enum
members, tuples and nested models. :class:`EventDecoder` does exactly those, per class,
on the dict orjson gives, and builds the event the way ``model_construct`` does (its
``__dict__`` set directly). Per event it costs about what ``model_validate_json`` does
(~4 µs here: orjson does the parsing, Python the conversions), and what it gives is
cheaper to use: its times are in ``datetime.UTC`` (pydantic gives each parsed time a
tzinfo object of its own, which the reader converted, ~1.5 µs per event, because every
later utcoffset, hash and compare of it cost more), and a time text seen again is the
same object (all events of one write share their recorded time), which
:func:`projections.base.iso` finds formatted already: rebuilds of the projections that
read every event are 10-20 % faster (alternated, docs/benchmarks.md, stop 23). The
event is equal to pydantic's: ``tests/test_storage_format.py`` decodes
every event of every bundled agent's sessions both ways.

A row the plan does not fit is not guessed at: :meth:`EventDecoder.decode` returns
None, and the caller validates it with pydantic (which raises its own error for a
corrupted row). That is the case for keys the class does not have, a missing required
field, null in a field that is not optional but converted (a time, UUID, enum, tuple),
a value a conversion rejects (a time text ``fromisoformat`` refuses, a string where an
array belongs), JSON orjson refuses, a ``class_version`` the class does not have, and
every class with a field type outside :func:`_converter`'s list. A class above version 1
is decoded too: a row stored at an earlier version goes through the class's
``upcast_vN_vN+1`` first, on the stored JSON, as :class:`ledger.mapper.PydanticMapper`
does. Plain strings,
integers and booleans are taken as written, unchecked: a row edited by hand to hold
``"3"`` for a token count reaches the projection as a string. Finding edited rows is
:mod:`ledger.verify`'s job (the hash chain), not decoding's.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import orjson
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_Convert = Callable[[Any], Any]

_FROM_ROW = ("originator_id", "originator_version")
"""Fields the caller gives from the row's columns (the row is the truth for the
stream position, as in :meth:`ledger.mapper.PydanticMapper.decode`)."""

_PLAIN = (str, int, bool, Any)
"""Field types whose JSON value is the field value (validated when it was written)."""


def _models(model: type[BaseModel]) -> _Convert:
    validate = model.model_validate

    def convert(items: list[Any]) -> tuple[Any, ...]:
        return tuple(map(validate, _items(items)))

    return convert


def _items(value: Any) -> tuple[Any, ...]:
    """A JSON array as a tuple (TypeError for anything else: a string or an object would
    make a tuple of its characters or keys)."""
    if type(value) is not list:
        raise TypeError(f"expected an array, not {type(value).__name__}")
    return tuple(value)


_TIMES = 4096
"""Parsed times kept per decoder before its cache starts again."""


def _times() -> _Convert:
    """``datetime.fromisoformat`` (``Z`` gives the ``datetime.UTC`` singleton) that gives
    the same object for the same text: all events of one write share their recorded
    time, so :func:`projections.base.iso` finds it formatted already (by identity)."""
    cache: dict[str, datetime] = {}
    parse = datetime.fromisoformat

    def convert(text: str) -> datetime:
        found = cache.get(text)
        if found is None:
            if len(cache) >= _TIMES:
                cache.clear()
            found = cache[text] = parse(text)
        return found

    return convert


def _converter(annotation: Any, times: _Convert) -> tuple[bool, _Convert | None]:
    """``(supported, convert)`` for a field annotation; ``convert`` None when the JSON
    value is already the field's value."""
    if annotation in _PLAIN:
        return True, None
    if annotation is float:
        return True, float
    if annotation is datetime:
        return True, times
    if annotation is UUID:
        return True, UUID
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return True, {m.value: m for m in annotation}.__getitem__
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        return _converter(args[0] if args[1] is type(None) else args[1], times)  # None stays None
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        if item in (str, int):
            return True, _items
        if isinstance(item, type) and issubclass(item, BaseModel):
            return True, _models(item)
    return False, None


def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


class _Layout(NamedTuple):
    """What a row with one order of keys needs: the defaults of the fields it lacks,
    the fields it sets, and the conversions of the fields it has."""

    defaults: dict[str, Any]
    fields_set: set[str]
    convert: tuple[tuple[str, _Convert, bool], ...]
    """(field, conversion, whether None is a value of the field)"""


class _Plan:
    """How one event class is built from its stored JSON."""

    __slots__ = ("convert", "defaults", "fields", "layouts", "upcasts", "version")

    def __init__(self, cls: type[BaseModel], times: _Convert) -> None:
        self.version: int = getattr(cls, "class_version", 1)
        self.upcasts = [getattr(cls, f"upcast_v{v}_v{v + 1}") for v in range(1, self.version)]
        self.fields = frozenset(cls.model_fields)
        self.convert: dict[str, tuple[_Convert, bool]] = {}
        self.defaults: dict[str, Any] = {}  # field -> default (immutable ones only)
        for name, info in cls.model_fields.items():
            if name in _FROM_ROW:
                continue
            supported, convert = _converter(info.annotation, times)
            if not supported or info.default_factory is not None:
                raise TypeError(f"{cls.__qualname__}.{name}: {info.annotation!r}")
            if convert is not None:
                self.convert[name] = (convert, _nullable(info.annotation))
            if info.default is not PydanticUndefined:
                if not isinstance(info.default, (str, int, float, bool, tuple, type(None))):
                    raise TypeError(f"{cls.__qualname__}.{name}: default {info.default!r}")
                self.defaults[name] = info.default
        self.layouts: dict[tuple[str, ...], _Layout | None] = {}

    def layout(self, keys: tuple[str, ...]) -> _Layout | None:
        """The :class:`_Layout` of a row with ``keys`` (in stored order); None when the
        row does not fit the class (a key it lacks, a required field absent)."""
        found = self.layouts.get(keys, False)
        if found is not False:
            return found  # type: ignore[return-value]
        present = frozenset(keys)
        absent = self.fields - present
        found = None
        if present <= self.fields and absent <= self.defaults.keys():
            found = _Layout(
                {name: self.defaults[name] for name in absent},
                set(present),  # shared by the events of this layout: frozen models
                tuple((k, *self.convert[k]) for k in keys if k in self.convert),
            )
        if len(self.layouts) < 64:  # a few layouts per class (one per writer version)
            self.layouts[keys] = found
        return found


class EventDecoder:
    """Builds events of the classes it can plan from stored JSON (the part of a row
    before :data:`ledger.envelope.RAW_SEPARATOR`)."""

    def __init__(self) -> None:
        self._plans: dict[type, _Plan | None] = {}
        self._times = _times()

    def supports(self, cls: type) -> bool:
        """Whether events of ``cls`` are decoded here (every field type known); else the
        caller validates them with pydantic."""
        plan = self._plans.get(cls, False)
        if plan is False:
            plan = None
            if issubclass(cls, BaseModel):
                try:
                    plan = _Plan(cls, self._times)
                except TypeError:
                    plan = None
            self._plans[cls] = plan
        return plan is not None

    def decode(self, cls: type, head: bytes, originator_id: UUID, originator_version: int) -> Any:
        """The event of class ``cls`` stored as JSON ``head`` in the row of
        ``originator_id`` (as given: a :class:`~uuid.UUID`) at ``originator_version``,
        or None when the row does not fit the class's plan (the caller validates it
        then). ``cls`` must be :meth:`supported <supports>`."""
        plan = self._plans[cls]
        assert plan is not None
        try:
            state = orjson.loads(head)
            if plan.version > 1:
                version = state.pop("class_version", 1)
                if version != plan.version:  # stored earlier: its upcasts, in order
                    if type(version) is not int or not 1 <= version < plan.version:
                        return None
                    for upcast in plan.upcasts[version - 1:]:
                        upcast(state)
            layout = plan.layout(tuple(state))
            if layout is None:
                return None
            for name, convert, nullable in layout.convert:
                value = state[name]
                if value is not None:
                    state[name] = convert(value)
                elif not nullable:
                    return None
            if layout.defaults:
                state.update(layout.defaults)
            state["originator_id"] = originator_id
            state["originator_version"] = originator_version
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        event = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(event, "__dict__", state)
        setattr_(event, "__pydantic_fields_set__", layout.fields_set)
        setattr_(event, "__pydantic_extra__", None)
        setattr_(event, "__pydantic_private__", None)
        return event

