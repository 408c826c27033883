"""Group commit: concurrent POSTs share ``Ledger.record`` calls, yet each answer carries
exactly its own events (checked against the log itself, on both backends)."""

from __future__ import annotations

import json
import threading

import httpx

from api.bootstrap import build
from ledger.config import Settings

from conftest import FIXTURES, Server

PAYLOADS = [
    p
    for p in json.loads(
        (FIXTURES / "attio-mcp-server-hook-logs" / "post_tool_use.json").read_text()
    )
    if not p.get("agent_id")
][:48]


def test_each_concurrent_post_gets_exactly_its_own_positions(
    settings: Settings, server: Server
) -> None:
    assert len(PAYLOADS) == 48
    answers: dict[int, dict] = {}
    barrier = threading.Barrier(16)

    def send(worker: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            barrier.wait()
            for n in range(worker, len(PAYLOADS), 16):
                r = client.post(
                    "/v1/hooks/claude-code",
                    json=PAYLOADS[n],
                    headers={"X-Hookledger-Capture-Key": f"group-{n}"},
                )
                assert r.status_code == 202, r.text
                answers[n] = r.json()

    threads = [threading.Thread(target=send, args=(w,)) for w in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.stop()

    services = build(settings)
    try:
        # position -> (session id, event) from the log itself
        log = {}
        for note in services.ledger.recorder.select_notifications(1, 10_000):
            log[note.id] = (str(note.originator_id), services.ledger.mapper.to_domain_event(note))
    finally:
        services.close()

    assert len(answers) == len(PAYLOADS)
    claimed = [p for a in answers.values() for p in a["positions"]]
    assert len(claimed) == len(set(claimed)), "a position was given to two requests"
    assert set(claimed) == set(log), "every appended event belongs to exactly one request"
    for n, answer in answers.items():
        assert answer["appended"] == len(answer["positions"]) >= 1
        assert answer["duplicates"] == 0
        assert len(answer["sessions"]) == 1
        keys = set()
        for pos in answer["positions"]:
            sid, event = log[pos]
            assert sid == answer["sessions"][0]
            keys.add(event.event_key)
        # its own hook's event, plus the stream's opening for the request that opened it
        assert keys in ({f"hook:group-{n}"}, {f"hook:group-{n}", "opened"}), (n, keys)
    assert (
        sum("opened" in {log[p][1].event_key for p in a["positions"]} for a in answers.values())
        == 1
    )
