"""Group commit: concurrent POSTs share ``Ledger.record`` calls, yet each answer carries
exactly its own events (checked against the log itself, on both backends)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import orjson

from api.bootstrap import build
from ledger.config import Settings
from ledger.ingest import parse_hook_body
from ledger.writer import GroupWriter

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
        # its own hook's events (the completion, and the start derived from it: these
        # PostToolUse payloads come without their PreToolUse), plus the stream's opening
        # for the request that opened it
        own = {f"hook:group-{n}", f"hook:group-{n}:start"}
        assert keys in (own, own | {"opened"}), (n, keys)
    assert (
        sum("opened" in {log[p][1].event_key for p in a["positions"]} for a in answers.values())
        == 1
    )


def _hook_items(n: int, prefix: str) -> list:
    return parse_hook_body("claude-code", orjson.dumps(PAYLOADS[n]), f"{prefix}-{n}")[0]


def test_answer_on_an_event_loop_gives_each_coroutine_its_own_result(settings: Settings) -> None:
    """``GroupWriter.answer`` (what the POST route awaits): 24 coroutines on one loop,
    one of them submitting something ``Ledger.record`` cannot record and one, in the
    middle of the queue, cancelled while waiting. Each other coroutine gets exactly its
    own event; the bad submission's error reaches only its own awaiter; the cancelled
    one's hook is still recorded, and answering around it raises nothing on the loop."""
    services = build(settings)
    writer = GroupWriter(services.ledger)
    writer.start()
    loop_errors: list[dict] = []

    async def main() -> list[object]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, c: loop_errors.append(c))
        first = [asyncio.ensure_future(writer.answer(_hook_items(n, "answer"))) for n in range(12)]
        cancelled = asyncio.ensure_future(writer.answer(_hook_items(24, "answer")))
        rest = [asyncio.ensure_future(writer.answer(_hook_items(n, "answer"))) for n in range(12, 24)]
        bad = asyncio.ensure_future(writer.answer([object()]))  # type: ignore[list-item]
        await asyncio.sleep(0)  # every submission is queued
        cancelled.cancel()
        # a lost answer fails here instead of hanging the test
        return await asyncio.wait_for(
            asyncio.gather(*first, *rest, bad, return_exceptions=True), 60
        )

    try:
        results = asyncio.run(main())
    finally:
        writer.close()
    try:
        log = {
            note.id: services.ledger.mapper.to_domain_event(note).event_key
            for note in services.ledger.recorder.select_notifications(1, 10_000)
        }
    finally:
        services.close()

    assert loop_errors == []
    *good, error = results
    assert isinstance(error, Exception), error
    claimed = [p for r in good for p in r.positions]  # type: ignore[attr-defined]
    assert len(claimed) == len(set(claimed))
    for n, r in enumerate(good):
        keys = {log[p] for p in r.positions}  # type: ignore[attr-defined]
        assert f"hook:answer-{n}" in keys, (n, keys)
        assert keys <= {f"hook:answer-{n}", f"hook:answer-{n}:start", "opened"}
    assert "hook:answer-24" in log.values()  # recorded although nobody awaited it
    unclaimed = {p for p, k in log.items() if k in ("hook:answer-24", "hook:answer-24:start")}
    assert set(log) - set(claimed) == unclaimed


def test_answer_without_a_running_writer_records_in_the_callers_thread(
    settings: Settings,
) -> None:
    services = build(settings)
    writer = GroupWriter(services.ledger)  # not started
    try:
        result = asyncio.run(writer.answer(_hook_items(0, "alone")))
        assert result.appended >= 1
        assert writer.groups == 0
        assert services.ledger.max_position() == max(result.positions)
    finally:
        services.close()


def test_submissions_racing_close_are_all_answered_and_recorded(settings: Settings) -> None:
    """``close`` while four threads keep submitting (what a ``POST /v1/journal`` worker
    thread can do during shutdown): every submission is answered, none waits forever
    behind the stop sentinel, and each hook is in the log once."""
    services = build(settings)
    writer = GroupWriter(services.ledger)
    writer.start()
    answered: list[int] = []
    failures: list[BaseException] = []
    started = threading.Barrier(5)

    def send(worker: int) -> None:
        started.wait()
        for n in range(worker, len(PAYLOADS), 4):
            try:
                answered.append(len(writer.submit(_hook_items(n, "closing")).result(timeout=30).positions))
            except BaseException as e:  # reported below
                failures.append(e)

    threads = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    started.wait()
    while len(answered) < 8 and not failures and any(t.is_alive() for t in threads):
        time.sleep(0.001)  # close while the senders are in full flow
    writer.close()
    for t in threads:
        t.join()
    try:
        keys = [
            services.ledger.mapper.to_domain_event(note).event_key
            for note in services.ledger.recorder.select_notifications(1, 10_000)
        ]
    finally:
        services.close()
    assert failures == []
    assert len(answered) == len(PAYLOADS)
    hook_keys = [k for k in keys if k.startswith("hook:closing-") and not k.endswith(":start")]
    assert sorted(hook_keys) == sorted(f"hook:closing-{n}" for n in range(len(PAYLOADS)))
