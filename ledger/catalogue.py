"""The event catalogue (``docs/events.md``), generated from the event classes.

Reads the nested event classes of :class:`ledger.session.Session`,
:class:`ledger.quarantine.Quarantine` and :class:`ledger.session_keys.SessionKey` (name, topic, ``class_version``, docstring,
pydantic fields) and the ``PRODUCES`` declaration of every source module in
:mod:`ledger.sources`: ``PRODUCES: dict[str, frozenset[str]]`` maps a
``source_format`` the module writes to the ``Session`` event class names it produces
(checked against the fixtures by ``tests/test_generated_docs.py``).

Regenerate with ``python scripts/gen_docs.py`` (writes docs/events.md and docs/cli.md);
:func:`render` returns the Markdown text. Units come from field names (:data:`UNITS`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ledger.envelope import LedgerEvent
from ledger.lifecycle import SessionStatus
from ledger.quarantine import Quarantine
from ledger.session import Session
from ledger.session_keys import SessionKey

REGENERATE = "python scripts/gen_docs.py"

UNITS: tuple[tuple[str, str, str], ...] = (
    (r"_ms$", "`*_ms`", "ms"),
    (r"tokens$", "`*tokens`", "tokens (count)"),
    (r"_usd$", "`*_usd`", "USD"),
    (r"(_at|^timestamp)$", "`*_at`, `timestamp`", "UTC datetime (ISO-8601 in JSON)"),
    (r"^size$", "`size`", "bytes"),
)
"""(field-name pattern, as written in the doc, unit): the first match gives the unit."""

LEDGER_PRODUCED: dict[str, str] = {
    "Session.Opened": "the ledger, before a stream's first fact",
    "Session.Reopened": "the ledger, when new activity arrives on an ended session",
    "Session.CwdLearned": "the ledger, when a fact names the working directory of a session opened without one",
    "Session.LateStartObserved": "the ledger, for a tool call's start arriving after its completion",
    "Quarantine.Opened": "the ledger, before a source's first rejected input",
    "Quarantine.InputRejected": "the ledger, for input any source or hook endpoint rejects",
    "SessionKey.Opened": "the ledger, for the first hook naming a session key (OpenClaw)",
    "SessionKey.Bound": "the ledger, for a hook carrying a session key and a session id",
    "SessionKey.Resolved": "the ledger, for a hook carrying only a session key",
    "SessionKey.PromptHeld": "the ledger, for a hook starting a new session with a prompt",
    "SessionKey.PromptPlaced": "the ledger, for the hook showing where a held prompt goes",
}
"""Events the ledger itself appends (not translated from a source record)."""


def source_declarations() -> list[tuple[str, str, frozenset[str]]]:
    """(module, source_format, event names) for every source module declaring PRODUCES."""
    import ledger.sources as pkg

    out = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for fmt, kinds in sorted(getattr(module, "PRODUCES", {}).items()):
            out.append((module.__name__, fmt, frozenset(kinds)))
    return out


def event_classes() -> list[tuple[str, type[LedgerEvent]]]:
    """("Session.Name" | "Quarantine.Name" | "SessionKey.Name", class) in definition
    order."""
    found: list[tuple[str, type[LedgerEvent]]] = []
    for agg in (Session, Quarantine, SessionKey):
        base = agg.Event  # type: ignore[attr-defined]
        for name, cls in vars(agg).items():
            if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
                found.append((f"{agg.__name__}.{name}", cls))
    return found


def unit(field: str) -> str:
    for pattern, _, u in UNITS:
        if re.search(pattern, field):
            return u
    return ""


def type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    text = str(annotation).replace("typing.", "")
    return re.sub(r"\b(?:[a-z_][\w]*\.)+([A-Za-z_]\w*)", r"\1", text)


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    if info.default is PydanticUndefined:
        return "(factory)"
    return f"`{info.default!r}`"


def _doc(cls: type) -> str:
    """The class's own docstring (not inherited), reST ``literals`` as Markdown."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc).replace("``", "`") if doc else "_(no docstring)_"


def _fields_table(model: type[BaseModel], names: list[str]) -> list[str]:
    if not names:
        return ["_(no fields of its own)_", ""]
    rows = ["| field | type | default | unit |", "|---|---|---|---|"]
    for n in names:
        info = model.model_fields[n]
        ann = type_name(info.annotation).replace("|", "\\|")
        rows.append(f"| `{n}` | `{ann}` | {_default(info)} | {unit(n)} |")
    return [*rows, ""]


def _own_fields(cls: type[BaseModel], base: type[BaseModel]) -> list[str]:
    return [n for n in cls.model_fields if n not in base.model_fields]


def render() -> str:
    """The Markdown text of docs/events.md."""
    decls = source_declarations()
    produced_by: dict[str, list[str]] = {}
    for _, fmt, kinds in decls:
        for k in kinds:
            produced_by.setdefault(f"Session.{k}", []).append(f"`{fmt}`")
    out = [
        "# Event catalogue",
        "",
        f"Generated by `{REGENERATE}` from the event classes (`ledger/session.py`,",
        "`ledger/quarantine.py`, `ledger/session_keys.py`) and the `PRODUCES` declarations",
        "of the source modules (`ledger/sources/`). Do not edit by hand;",
        "`tests/test_generated_docs.py` fails when this file is stale.",
        "",
        "Event classes are a storage contract: their topics (`ledger.session:Session.<Name>`)",
        "are persisted, so a class is never renamed; a payload evolves with `class_version`",
        "and an upcaster. Units follow the field names: "
        + "; ".join(f"{label}: {u}" for _, label, u in UNITS)
        + ".",
        "",
        "`SessionStatus` (lifecycle state after the event): "
        + ", ".join(f"`{s.value}`" for s in SessionStatus)
        + ".",
        "",
        "## Envelope (every event)",
        "",
        _doc(LedgerEvent),
        "",
        *_fields_table(LedgerEvent, list(LedgerEvent.model_fields)),
        "### `Session.Event` adds",
        "",
        _doc(Session.Event),
        "",
        *_fields_table(Session.Event, _own_fields(Session.Event, LedgerEvent)),
        "## Sources",
        "",
        "| source_format | module | events |",
        "|---|---|---|",
    ]
    for module, fmt, kinds in decls:
        out.append(f"| `{fmt}` | `{module}` | {', '.join(sorted(kinds))} |")
    out.append("")
    section = None
    for qualname, cls in event_classes():
        agg = qualname.split(".")[0]
        if agg != section:
            section = agg
            out += [f"## {agg} events", ""]
        base = {"Session": Session.Event, "Quarantine": Quarantine.Event}.get(
            agg, SessionKey.Event
        )
        sources = produced_by.get(qualname, [])
        if qualname in LEDGER_PRODUCED:
            sources = [LEDGER_PRODUCED[qualname], *sources]
        producers = ", ".join(sources) or "_(no source declares it)_"
        out += [
            f"### {qualname}",
            "",
            f"Topic `{cls.__module__}:{cls.__qualname__}`, class_version "
            f"{cls.class_version}. Produced by: {producers}.",
            "",
            _doc(cls),
            "",
            *_fields_table(cls, _own_fields(cls, base)),
        ]
    return "\n".join(out).rstrip("\n") + "\n"
