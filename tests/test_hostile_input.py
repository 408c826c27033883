"""Hostile and malformed input at the edges is recorded, or rejected with its reason, and
stops nothing after it: not the writer, not the spool journal, not the projections."""

from __future__ import annotations

import json

from api.bootstrap import Services
from ledger.ingest import ingest_hook
from ledger.session import Session
from ledger.sources.claude_common import parse_time
from projections import queries


def test_a_time_whose_utc_instant_no_datetime_holds_is_no_time(services: Services) -> None:
    # 9999-12-31T23:59:59-01:00 is a valid ISO-8601 time, but one hour past year 9999 in
    # UTC: a projection that converted it to UTC stopped there, and every read after it
    # answered 500
    body = {
        "session_id": "far",
        "hook_event_name": "BeforeAgent",
        "prompt": "hi",
        "timestamp": "9999-12-31T23:59:59-01:00",
    }
    outcome = ingest_hook(services.ledger, "gemini", json.dumps(body).encode(), "capture-1")
    assert outcome.error is None and outcome.result.appended == 2
    services.runner.catch_up()
    [session] = queries.list_sessions(services.models)
    assert session["prompt_count"] == 1
    [prompt] = [
        e for _, e in services.ledger.read_log(0, 10) if isinstance(e, Session.PromptSubmitted)
    ]
    assert prompt.occurred_at is not None and prompt.occurred_at.year < 9999  # the capture time
    for text in ("9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"):
        assert parse_time(text) is None
    assert parse_time("9999-12-31T23:59:59+01:00") is not None
