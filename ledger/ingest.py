"""Hook ingestion semantics, shared by ``POST /v1/hooks/{agent}`` and the spool.

A body that cannot be parsed or attributed is recorded as rejected input (with the
reason) and reported as such; it is never dropped and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from ledger.app import Ledger, RecordResult
from ledger.observation import Observation, Rejected
from ledger.privacy import may_hold_private
from ledger.sources import claude_hooks

HOOK_PARSERS = {"claude-code": claude_hooks}
MAX_BODY_BYTES = 32 * 1024 * 1024


class UnknownAgentError(ValueError):
    pass


@dataclass
class IngestOutcome:
    result: RecordResult
    error: str | None = None


def ingest_hook(
    ledger: Ledger,
    agent: str,
    body: bytes,
    capture_key: str,
    captured_at: datetime | None = None,
) -> IngestOutcome:
    """Parse and record one hook body. ``error`` is set when the body was rejected."""
    items, error = parse_hook_body(agent, body, capture_key, captured_at)
    return IngestOutcome(ledger.record(items), error)


def parse_hook_body(
    agent: str,
    body: bytes,
    capture_key: str,
    captured_at: datetime | None = None,
) -> tuple[list[Observation | Rejected], str | None]:
    """Parse one hook body into what :meth:`Ledger.record` takes, without recording.

    Returns (items, error): a body that cannot be parsed gives one :class:`Rejected`
    item and the reason in ``error``. Never raises on bad input.
    """
    module = HOOK_PARSERS.get(agent)
    source = f"hook:{agent}"
    at = captured_at or datetime.now(UTC)
    if module is None:
        reason = f"unknown agent {agent!r} (known: {', '.join(sorted(HOOK_PARSERS))})"
        return _reject(source, capture_key, reason, body, agent)
    if len(body) > MAX_BODY_BYTES:
        return _reject(source, capture_key, f"body larger than {MAX_BODY_BYTES} bytes", body, agent)
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        reason = f"not valid JSON: {e}"
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            reason = "not valid UTF-8 JSON"
        return _reject(source, capture_key, reason, body, agent)
    try:
        # Claude Code payloads skip the privacy walk when the bytes cannot hold a tag.
        extra = {"may_hold_private": may_hold_private(body)} if module is claude_hooks else {}
        observations: list[Observation | Rejected] = [
            *module.parse_hook(payload, capture_key, at, **extra)
        ]
    except claude_hooks.HookPayloadError as e:
        return _reject(source, capture_key, str(e), body, agent)
    return observations, None


def _reject(
    source: str, key: str, reason: str, body: bytes, agent: str
) -> tuple[list[Observation | Rejected], str]:
    return [Rejected(source, f"capture {key}", reason, body, agent, f"{agent}.hook")], reason
