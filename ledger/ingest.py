"""Hook ingestion semantics, shared by ``POST /v1/hooks/{agent}`` and the spool journal.

A body that cannot be parsed or attributed is recorded as rejected input (with the
reason) and reported as such; it is never dropped and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from ledger import jsontext
from ledger.app import Ledger, RecordResult
from ledger.observation import Observation, Rejected
from ledger.sources import claude_hooks, codex_hooks, cursor_hooks, gemini_hooks, openclaw_hooks

HOOK_PARSERS = {
    "claude-code": claude_hooks,
    "codex": codex_hooks,  # Codex command hooks (raise claude_hooks.HookPayloadError)
    "gemini": gemini_hooks,
    "cursor": cursor_hooks,
    "openclaw": openclaw_hooks,
}
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_EDGE_REDACTIONS_BYTES = 8192
"""Longest edge-redaction list accepted as text (the hook client sends at most 4,096)."""
MAX_EDGE_REDACTIONS = 512
_KIND = re.compile(r"[a-z0-9_]{1,64}")


class UnknownAgentError(ValueError):
    pass


@dataclass
class IngestOutcome:
    result: RecordResult
    error: str | None = None


class EdgeRedactionsError(ValueError):
    """An edge-redaction list that is not what the hook client writes (the reason)."""


def parse_edge_redactions(text: str | bytes) -> list[dict]:
    """The redactions a hook client made before sending a body (the
    ``X-Hookledger-Redactions`` header: compact JSON, as in a journal record header),
    checked by :func:`check_edge_redactions`.

    Raises:
        EdgeRedactionsError: longer than ``MAX_EDGE_REDACTIONS_BYTES``, not JSON, or
            not a valid list (the message says which).
    """
    if len(text) > MAX_EDGE_REDACTIONS_BYTES:
        raise EdgeRedactionsError(f"longer than {MAX_EDGE_REDACTIONS_BYTES} bytes")
    try:
        value = jsontext.loads(text)
    except orjson.JSONDecodeError as e:
        raise EdgeRedactionsError(f"not JSON: {e}") from None
    return check_edge_redactions(value)


def check_edge_redactions(value: object) -> list[dict]:
    """``value`` as a list of ``{"kind", "path", "count"}`` dicts, exactly: ``kind``
    1-64 of ``[a-z0-9_]``, ``path`` a JSON path starting with ``$`` (at most 1,024
    characters), ``count`` an integer >= 1; at most ``MAX_EDGE_REDACTIONS`` entries.

    Raises:
        EdgeRedactionsError: the first thing that is not so.
    """
    if not isinstance(value, list):
        raise EdgeRedactionsError(f"not a list but {type(value).__name__}")
    if len(value) > MAX_EDGE_REDACTIONS:
        raise EdgeRedactionsError(f"more than {MAX_EDGE_REDACTIONS} entries")
    out = []
    for i, r in enumerate(value):
        if not isinstance(r, dict) or set(r) != {"kind", "path", "count"}:
            raise EdgeRedactionsError(f"entry {i} is not exactly {{kind, path, count}}")
        kind, path, count = r["kind"], r["path"], r["count"]
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise EdgeRedactionsError(f"entry {i}: bad kind {kind!r}")
        if not isinstance(path, str) or not path.startswith("$") or len(path) > 1024:
            raise EdgeRedactionsError(f"entry {i}: bad path")
        if type(count) is not int or count < 1:
            raise EdgeRedactionsError(f"entry {i}: bad count {count!r}")
        out.append({"kind": kind, "path": path, "count": count})
    return out


def ingest_hook(
    ledger: Ledger,
    agent: str,
    body: bytes,
    capture_key: str,
    captured_at: datetime | None = None,
    edge_redactions: list[dict] | None = None,
) -> IngestOutcome:
    """Parse and record one hook body. ``error`` is set when the body was rejected
    (see :func:`parse_hook_body`)."""
    items, error = parse_hook_body(agent, body, capture_key, captured_at, edge_redactions)
    return IngestOutcome(ledger.record(items), error)


def parse_hook_body(
    agent: str,
    body: bytes,
    capture_key: str,
    captured_at: datetime | None = None,
    edge_redactions: list[dict] | None = None,
) -> tuple[list[Observation | Rejected], str | None]:
    """Parse one hook body into what :meth:`Ledger.record` takes, without recording.

    ``edge_redactions``: redactions the hook client already applied to ``body`` before
    spooling it (``{kind, path, count}``); they travel with the first fact (or the
    rejected input), so a redaction made at the edge is in the log too.

    Returns (items, error): a body that cannot be parsed gives one :class:`Rejected`
    item and the reason in ``error``. Never raises on bad input.
    """
    edge = tuple(edge_redactions or ())
    module = HOOK_PARSERS.get(agent)
    source = f"hook:{agent}"
    at = captured_at or datetime.now(UTC)
    if module is None:
        reason = f"unknown agent {agent!r} (known: {', '.join(sorted(HOOK_PARSERS))})"
        return _reject(source, capture_key, reason, body, agent, edge)
    if len(body) > MAX_BODY_BYTES:
        reason = f"body larger than {MAX_BODY_BYTES} bytes"
        return _reject(source, capture_key, reason, body, agent, edge)
    try:
        payload = jsontext.loads(body)
    except jsontext.TooDeep as e:
        return _reject(source, capture_key, str(e), body, agent, edge)
    except orjson.JSONDecodeError as e:
        reason = f"not valid JSON: {e}"
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            reason = "not valid UTF-8 JSON"
        return _reject(source, capture_key, reason, body, agent, edge)
    try:
        # The body lets privacy skip the walk (or try only some secret rules).
        observations: list[Observation | Rejected] = [
            *module.parse_hook(payload, capture_key, at, raw=body)
        ]
    except claude_hooks.HookPayloadError as e:
        return _reject(source, capture_key, str(e), body, agent, edge)
    except Exception as e:  # a shape its parser does not expect: kept, with the reason
        reason = f"the {agent} hook parser cannot read it: {type(e).__name__}: {e}"
        return _reject(source, capture_key, reason, body, agent, edge)
    if edge and observations and isinstance(observations[0], Observation):
        observations[0].redactions = (*edge, *observations[0].redactions)
    return observations, None


def _reject(
    source: str, key: str, reason: str, body: bytes, agent: str, edge: tuple[dict, ...] = ()
) -> tuple[list[Observation | Rejected], str]:
    rejected = Rejected(source, f"capture {key}", reason, body, agent, f"{agent}.hook", edge)
    return [rejected], reason
