"""``GET /v1/stream``: every log position exactly once, across reconnects and a server
restart; filters; a slow client neither blocks the others nor loses events.

Real data: Claude Code 2.1.170 hook payloads (``coorp-serverless-plugins-hook-logs``,
session 4f65f198 in transcript order, see ``test_hook_replay``) and Claude Code 1.0.7x
payloads of another project (``attio-mcp-server-hook-logs``), POSTed to a real
``hookledger serve``; SSE parsed with httpx-sse. Expected positions come from the
notification log itself or from the POST answers, never from the stream code.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse
from sse_starlette import EventSourceResponse
from sse_starlette import sse as sse_module
from sse_starlette.sse import SendTimeoutError
from test_hook_replay import SESSION, _ordered_payloads, _subagent_payloads

from api.bootstrap import build
from api.broadcaster import Broadcaster
from api.stream import Filter, StreamResponse, messages
from ledger.config import Settings
from ledger.ingest import ingest_hook

from conftest import FIXTURES, Server

ATTIO = FIXTURES / "attio-mcp-server-hook-logs"
COORP = FIXTURES / "coorp-serverless-plugins-hook-logs"
ATTIO_CWD = "/Users/kesslerio/GDrive/Projects/attio-mcp-server"


def log_positions(settings: Settings) -> list[int]:
    services = build(settings)
    try:
        return [n.id for n in services.ledger.recorder.select_notifications(start=0, limit=10**7)]
    finally:
        services.close()


async def post(
    client: httpx.AsyncClient, payload: dict[str, Any], key: str, tries: int = 600
) -> dict[str, Any]:
    """POST one hook payload, retrying (same capture key) while the server restarts."""
    for _ in range(tries):
        try:
            r = await client.post(
                "/v1/hooks/claude-code", json=payload, headers={"X-Hookledger-Capture-Key": key}
            )
            assert r.status_code == 202, r.text
            return r.json()
        except httpx.TransportError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"could not post {key}")


class Reader:
    """Reads ``/v1/stream``; reconnects with ``Last-Event-ID`` after every ``k``-th
    message and after errors (a server restart), like a browser's EventSource."""

    def __init__(
        self, url: str, params: dict[str, str] | None = None, k: int = 0, after: str | None = None
    ):
        self.url, self.params, self.k = url, params or {}, k
        self.last = after
        self.received: list[tuple[int, str, dict[str, Any]]] = []
        self.connects = 0
        self.connected = asyncio.Event()

    def ids(self, kind: str = "event.appended") -> list[int]:
        return [i for i, e, _ in self.received if e == kind]

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as client:
            while True:
                headers = {"Last-Event-ID": self.last} if self.last is not None else {}
                try:
                    async with aconnect_sse(
                        client, "GET", self.url + "/v1/stream", params=self.params, headers=headers
                    ) as es:
                        es.response.raise_for_status()
                        self.connects += 1
                        self.connected.set()
                        n = 0
                        async for sse in es.aiter_sse():
                            if not sse.id or not sse.data:  # the retry hint has no data
                                continue
                            self.received.append((int(sse.id), sse.event, json.loads(sse.data)))
                            self.last = sse.id
                            n += 1
                            if self.k and n == self.k:
                                break
                except (httpx.TransportError, httpx.HTTPStatusError):
                    await asyncio.sleep(0.1)

    async def until(self, done: Any, timeout: float = 60) -> None:
        with anyio.fail_after(timeout):
            while not done(self):
                await asyncio.sleep(0.05)


def test_resume_every_kth_event_across_restart(settings: Settings) -> None:
    payloads, _ = _ordered_payloads()
    srv = Server(settings).start()

    async def main() -> int:
        reader = Reader(srv.url, {"kinds": "event.appended"}, k=7, after="0")
        async with (
            anyio.create_task_group() as tg,
            httpx.AsyncClient(base_url=srv.url, timeout=30) as client,
        ):
            tg.start_soon(reader.run)
            await reader.until(lambda r: r.connects > 0)
            half = len(payloads) // 2
            for n, payload in enumerate(payloads[:half]):
                await post(client, payload, f"resume-{n}")
            # stop and restart the server while posting goes on (it retries meanwhile)
            restart = asyncio.ensure_future(
                anyio.to_thread.run_sync(lambda: (srv.stop(), srv.start()))
            )
            for n, payload in enumerate(payloads[half:], half):
                await post(client, payload, f"resume-{n}")
            await restart
            head = (await client.get("/healthz")).json()["head"]
            await reader.until(lambda r: r.last is not None and int(r.last) >= head)
            tg.cancel_scope.cancel()
        assert reader.connects > len(reader.received) // 7  # it really reconnected every 7th
        return reader

    try:
        reader = asyncio.run(main())
    finally:
        srv.stop()
    log = log_positions(settings)
    assert len(log) >= len(payloads)
    assert reader.ids() == log  # every position, once, in order


def test_filters(settings: Settings) -> None:
    """session / project / kinds filters, live and replayed from the log."""
    coorp_start = json.loads((COORP / "session_start.json").read_text())
    coorp_end = json.loads((COORP / "session_end.json").read_text())
    attio = [
        p
        for name in ("session_start.json", "user_prompt_submit.json", "stop.json")
        for p in json.loads((ATTIO / name).read_text())
    ]
    ordered = coorp_start + attio + coorp_end
    srv = Server(settings).start()  # no summary worker (conftest.settings_env)

    async def main() -> dict[str, Any]:
        live = {
            "session": Reader(srv.url, {"session": SESSION, "kinds": "event.appended"}),
            "project": Reader(srv.url, {"project": ATTIO_CWD, "kinds": "event.appended"}),
            "completed": Reader(srv.url, {"kinds": "session.completed"}),
            "all": Reader(srv.url),
        }
        answers = []
        async with (
            anyio.create_task_group() as tg,
            httpx.AsyncClient(base_url=srv.url, timeout=30) as client,
        ):
            for r in live.values():
                tg.start_soon(r.run)
            for r in live.values():
                await r.until(lambda r: r.connects > 0)
            for n, payload in enumerate(ordered):
                answers.append((payload, await post(client, payload, f"filter-{n}")))
            head = (await client.get("/healthz")).json()["head"]
            await live["all"].until(lambda r: r.ids() and r.ids()[-1] >= head)
            replay = {
                "session": Reader(
                    srv.url, {"session": SESSION[:8], "kinds": "event.appended"}, after="0"
                ),
                "project": Reader(
                    srv.url, {"project": ATTIO_CWD + "/", "kinds": "event.appended"}, after="0"
                ),
            }
            for r in replay.values():
                tg.start_soon(r.run)
            await asyncio.sleep(2)  # live readers: time for anything wrongly extra to arrive
            expected = {
                "session": sorted(
                    p for pl, a in answers if pl["session_id"] == SESSION for p in a["positions"]
                ),
                "project": sorted(
                    p for pl, a in answers if pl["cwd"] == ATTIO_CWD for p in a["positions"]
                ),
            }
            for name, r in replay.items():
                await r.until(lambda r, name=name: len(r.ids()) >= len(expected[name]))
            tg.cancel_scope.cancel()
        return {"live": live, "replay": replay, "expected": expected, "head": head}

    try:
        out = asyncio.run(main())
    finally:
        srv.stop()
    live, replay, expected = out["live"], out["replay"], out["expected"]
    assert len(expected["session"]) == 2  # Opened + Started of the one SessionStart posted
    assert len(expected["project"]) > 20
    for name in ("session", "project"):
        assert live[name].ids() == expected[name]
        assert replay[name].ids() == expected[name]
        assert {e for _, e, _ in live[name].received} == {"event.appended"}
    assert live["all"].ids() == log_positions(settings)
    # one SessionEnd payload in the fixture -> one session.completed, for its session
    ended = {p["session_id"] for p in coorp_end}
    assert len(live["completed"].received) == len(coorp_end) == 1
    assert {m["session"]["external_id"] for _, _, m in live["completed"].received} == ended
    assert {e for _, e, _ in live["completed"].received} == {"session.completed"}
    kinds = {e for _, e, _ in live["all"].received}
    assert {"event.appended", "session.updated", "batch.completed", "session.completed"} <= kinds


def test_bad_parameters(server: Server) -> None:
    assert httpx.get(server.url + "/v1/stream", params={"kinds": "nope"}).status_code == 400
    assert httpx.get(server.url + "/v1/stream", params={"after": "x"}).status_code == 400
    r = httpx.get(server.url + "/v1/stream", headers={"Last-Event-ID": "-3"})
    assert r.status_code == 400 and "error" in r.json()
    assert httpx.get(server.url + "/v1/stream", params={"children": "yes"}).status_code == 400


def test_an_ambiguous_session_prefix_is_a_400_and_an_unknown_session_is_waited_for(
    settings: Settings,
) -> None:
    """A ``session`` prefix of two sessions' ids opened a stream that never sent a
    message (the filter fell back to the prefix as an id): now a 400 naming both, as
    ``hookledger show`` does. A prefix of a subagent's id only: a 400 too. A ``session``
    nothing starts with may be a session not started yet (docs/sse.md): the stream
    opens and sends that session's events once its first hook arrives."""
    starts = [
        p for d in (COORP, ATTIO) for p in json.loads((d / "session_start.json").read_text())
    ]
    by_external = {p["session_id"]: p for p in starts}
    waited_for = "8664c04e-75fa-497d-ac11-57d69997e3ec"  # attio's: posted while a stream waits
    later = by_external.pop(waited_for)
    tools, _stop = _subagent_payloads(_subagent_id())
    srv = Server(settings).start()

    async def main() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            ids = {}
            for n, p in enumerate(by_external.values()):
                ids[p["session_id"]] = (await post(client, p, f"amb-{n}"))["sessions"][0]
            for n, p in enumerate(tools[:2]):
                await post(client, p, f"amb-sub-{n}")
            # two ledger ids and two external ids start with "4" (computed, not assumed)
            prefix = "4"
            both = sorted(i for e, i in ids.items() if i.startswith(prefix) or e.startswith(prefix))
            answers = {}
            sub = (await client.get("/v1/sessions", params={"limit": 1000})).json()["sessions"]
            child = next(s for s in sub if s["parent_id"])
            for name, ref in (("prefix", prefix), ("subagent", child["external_id"][:-3])):
                params = {"session": ref, "after": "0"}
                async with client.stream("GET", "/v1/stream", params=params) as r:  # a 200 never ends
                    answers[name] = (r.status_code, "" if r.status_code == 200 else (await r.aread()).decode())
            waiting = Reader(srv.url, {"session": waited_for, "kinds": "event.appended"}, after="0")
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting.run)
                await waiting.until(lambda r: r.connects > 0)
                positions = (await post(client, later, "amb-later"))["positions"]
                await waiting.until(lambda r: len(r.ids()) >= len(positions))
                tg.cancel_scope.cancel()
        return {"both": both, "answers": answers, "waited": waiting.ids(), "positions": positions,
                "child": child}

    try:
        out = asyncio.run(main())
    finally:
        srv.stop()
    status, error = out["answers"]["prefix"]
    assert len(out["both"]) >= 2
    assert status == 400 and "more than one session matches '4'" in error
    assert all(i in error for i in out["both"])
    status, error = out["answers"]["subagent"]
    assert status == 400 and "only a subagent's id starts with" in error and out["child"]["id"] in error
    assert out["waited"] == out["positions"]


def _subagent_id() -> str:
    """The agent_id of the first subagent run of session 4f65f198's hooks."""
    return next(
        p["agent_id"] for p in json.loads((COORP / SESSION / "pre_tool_use.json").read_text())
        if p.get("agent_id")
    )


@pytest.mark.parametrize("kinds", [",", " ", ", ,"])
def test_kinds_naming_no_kind_is_a_400_not_a_silent_stream(server: Server, kinds: str) -> None:
    # it opened a stream that never sent a message: the filter took no kind at all
    r = httpx.get(server.url + "/v1/stream", params={"kinds": kinds, "after": "0"})
    assert r.status_code == 400 and "kinds names no kind" in r.json()["error"]


def test_children_adds_the_subagents_session_updates_to_a_session_stream(settings: Settings) -> None:
    """``session`` with ``children=1``: the parent's messages plus the ``session.updated``
    of its subagent run (live, and replayed from the log), none of the subagent's other
    messages; without ``children`` nothing of the subagent. Real hooks: session 4f65f198
    starts, then one of its subagents runs 10 tool calls (``agent_id`` set) and stops."""
    start = [p for p in json.loads((COORP / "session_start.json").read_text()) if p["session_id"] == SESSION]
    tools, stop = _subagent_payloads("ab697ae37d23fb555")
    srv = Server(settings).start()

    def child_rows(r: Reader, child: str) -> list[dict[str, Any]]:
        return [d["session"] for _, e, d in r.received if e == "session.updated" and d["session_id"] == child]

    async def main() -> dict[str, Any]:
        async with (
            anyio.create_task_group() as tg,
            httpx.AsyncClient(base_url=srv.url, timeout=30) as client,
        ):
            # by ledger id, as the viewer asks once it knows it (children are matched by
            # their rows' parent_id, a ledger id)
            opened = await post(client, start[0], "children-start")
            parent = opened["sessions"][0]
            live = {
                "children": Reader(srv.url, {"session": parent, "children": "1"}),
                "alone": Reader(srv.url, {"session": parent}),
            }
            for r in live.values():
                tg.start_soon(r.run)
            for r in live.values():
                await r.until(lambda r: r.connects > 0)
            for n, payload in enumerate([*tools, stop]):
                await post(client, payload, f"children-{n}")
            detail = (await client.get(f"/v1/sessions/{parent}")).json()
            (child,) = detail["children"]
            final = (await client.get(f"/v1/sessions/{child}")).json()
            done = lambda r: any(  # noqa: E731
                s["event_count"] == final["event_count"] for s in child_rows(r, child)
            )
            await live["children"].until(done)
            replay = Reader(srv.url, {"session": parent, "children": "1"}, after="0")
            tg.start_soon(replay.run)
            await replay.until(done)
            await asyncio.sleep(1)  # anything wrongly extra would arrive now
            events = (await client.get(f"/v1/sessions/{parent}/events")).json()["events"]
            tg.cancel_scope.cancel()
        return {"live": live, "replay": replay, "parent": parent, "child": child, "final": final,
                "positions": [e["position"] for e in events], "before": max(opened["positions"])}

    try:
        out = asyncio.run(main())
    finally:
        srv.stop()
    parent, child, final = out["parent"], out["child"], out["final"]
    assert final["parent_id"] == parent and final["tool_call_count"] == 10
    assert final["status"] == "COMPLETED"  # the SubagentStop hook ended the run
    later = [p for p in out["positions"] if p > out["before"]]  # after the live readers joined
    for r, own in ((out["live"]["children"], later), (out["replay"], out["positions"])):
        assert r.ids() == own  # the parent's events, not the child's
        assert {(e, d["session_id"]) for _, e, d in r.received if d["session_id"] != parent} == {
            ("session.updated", child)
        }
        rows = child_rows(r, child)
        assert rows[-1] == {k: final[k] for k in rows[-1]}  # the newest row: as the API has it
        assert all(s["parent_id"] == parent for s in rows)
    alone = out["live"]["alone"]
    assert alone.ids() == later
    assert all(d["session_id"] == parent for _, _, d in alone.received)


def test_slow_client_does_not_block_others(settings: Settings) -> None:
    """One client stops reading; the others still get every position while it stalls,
    and the stalled one, once it reads again, gets every position exactly once."""
    payloads, _ = _ordered_payloads()
    srv = Server(settings).start()

    async def main() -> tuple[list[Reader], list[int], int]:
        fast = [Reader(srv.url, {"kinds": "event.appended"}, after="0") for _ in range(4)]
        async with (
            anyio.create_task_group() as tg,
            httpx.AsyncClient(base_url=srv.url, timeout=30) as client,
        ):
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as slow_client,
                aconnect_sse(
                    slow_client,
                    "GET",
                    srv.url + "/v1/stream",
                    params={"kinds": "event.appended", "after": "0"},
                ) as slow,
            ):
                for r in fast:
                    tg.start_soon(r.run)
                for r in fast:
                    await r.until(lambda r: r.connects > 0)
                for n, payload in enumerate(payloads):
                    await post(client, payload, f"slow-{n}")
                head = (await client.get("/healthz")).json()["head"]
                # the slow client has read nothing yet; the others are complete
                for r in fast:
                    await r.until(lambda r: r.ids() and r.ids()[-1] >= head, timeout=30)
                got = []
                async for sse in slow.aiter_sse():
                    if not sse.data:  # the retry hint
                        continue
                    got.append(int(sse.id))
                    if int(sse.id) >= head:
                        break
            tg.cancel_scope.cancel()
        return fast, got, head

    try:
        fast, slow_ids, _head = asyncio.run(main())
    finally:
        srv.stop()
    log = log_positions(settings)
    for r in fast:
        assert r.ids() == log
    assert slow_ids == log


def frame_ids(frames: bytes) -> list[int]:
    """The ``id:`` fields of encoded SSE messages (as sse-starlette writes them)."""
    return [int(line[4:]) for line in frames.decode().splitlines() if line.startswith("id: ")]


@pytest.mark.parametrize("queue_sections", [2])
def test_overflowing_client_is_resumed_from_the_log(
    settings: Settings, queue_sections: int
) -> None:
    """In-process: a client that does not read while many sections are published
    overflows its bounded queue, is switched to the log and still gets every position once."""
    payloads, _ = _ordered_payloads()
    services = build(settings)

    async def main() -> tuple[list[int], int]:
        broadcaster = Broadcaster(services, queue_sections=queue_sections)
        await broadcaster.start()
        stream = messages(services, broadcaster, 0, Filter(kinds=frozenset({"event.appended"})))
        first = await stream.__anext__()  # subscribes; the retry hint
        assert b"retry:" in first
        sub = next(iter(broadcaster.subscribers))
        body = json.dumps(payloads[0]).encode()
        await anyio.to_thread.run_sync(
            lambda: ingest_hook(services.ledger, "claude-code", body, "o-0", datetime.now(UTC))
        )
        got = frame_ids(await asyncio.wait_for(stream.__anext__(), 30))  # now reading live
        assert got[0] == 1
        for n, payload in enumerate(payloads[1:], 1):
            body = json.dumps(payload).encode()
            await anyio.to_thread.run_sync(
                lambda body=body, n=n: ingest_hook(
                    services.ledger, "claude-code", body, f"o-{n}", datetime.now(UTC)
                )
            )
            await asyncio.sleep(0.01)  # let the broadcaster publish each save as a section
        head = services.ledger.max_position()
        while got[-1] < head:
            got.extend(frame_ids(await asyncio.wait_for(stream.__anext__(), 30)))
        await stream.aclose()
        await broadcaster.stop()
        return got, sub.overflows

    try:
        got, overflows = asyncio.run(main())
        log = [n.id for n in services.ledger.recorder.select_notifications(start=0, limit=10**7)]
    finally:
        services.close()
    assert overflows >= 1
    assert got == log


def test_project_filter_while_projections_lag(settings: Settings) -> None:
    """A session's cwd is known to the project filter even before the projections ran
    (the stream reads it from the session's stored ``Opened`` event)."""
    start = json.loads((COORP / "session_start.json").read_text())[0]
    services = build(settings)

    async def main() -> list[int]:
        body = json.dumps(start).encode()
        result = ingest_hook(services.ledger, "claude-code", body, "lag-0", datetime.now(UTC))
        assert len(result.result.positions) == 2  # Opened, Started; no projection has run
        broadcaster = Broadcaster(services)
        await broadcaster.start()
        accept = Filter(project=start["cwd"], kinds=frozenset({"event.appended"}))
        stream = messages(services, broadcaster, 1, accept)  # after Opened
        await stream.__anext__()  # the retry hint
        got = frame_ids(await asyncio.wait_for(stream.__anext__(), 30))
        await stream.aclose()
        await broadcaster.stop()
        return got

    try:
        assert asyncio.run(main()) == [2]
    finally:
        services.close()


def test_client_joining_after_unheard_saves_gets_every_position(settings: Settings) -> None:
    """Saves made while nobody is subscribed are not read by the broadcaster (its head
    just moves on); a client that joins afterwards reads them from the log, then gets
    the later saves live: every position once, in order."""
    payloads, _ = _ordered_payloads()
    services = build(settings)

    def save(n: int) -> None:
        body = json.dumps(payloads[n]).encode()
        ingest_hook(services.ledger, "claude-code", body, f"u-{n}", datetime.now(UTC))

    async def main() -> tuple[list[int], int]:
        broadcaster = Broadcaster(services, poll_s=0.05)
        await broadcaster.start()
        for n in range(10):
            await anyio.to_thread.run_sync(save, n)
        head = services.ledger.max_position()
        with anyio.fail_after(10):
            while broadcaster.head < head:  # moved on without a subscriber
                await asyncio.sleep(0.01)
        known = len(broadcaster._known)  # sessions identified: none, nothing was read
        stream = messages(services, broadcaster, 0, Filter(kinds=frozenset({"event.appended"})))
        await stream.__anext__()  # subscribes; the retry hint
        got: list[int] = []
        for n in range(10, 20):
            await anyio.to_thread.run_sync(save, n)
        head = services.ledger.max_position()
        while not got or got[-1] < head:
            got.extend(frame_ids(await asyncio.wait_for(stream.__anext__(), 30)))
        await stream.aclose()
        await broadcaster.stop()
        return got, known

    try:
        got, known = asyncio.run(main())
        log = [n.id for n in services.ledger.recorder.select_notifications(start=0, limit=10**7)]
    finally:
        services.close()
    assert got == log
    assert known == 0


def test_derived_messages_only_built_for_clients_that_take_them(settings: Settings) -> None:
    """While the only client takes ``event.appended``, no derived section is built; a
    client of every kind that joins afterwards still gets the ``session.updated`` of
    those saves (from the log), then live ones."""
    payloads, _ = _ordered_payloads()
    services = build(settings)

    def save(n: int) -> None:
        body = json.dumps(payloads[n]).encode()
        ingest_hook(services.ledger, "claude-code", body, f"d-{n}", datetime.now(UTC))

    async def main() -> tuple[int, list[str], int]:
        broadcaster = Broadcaster(services)
        await broadcaster.start()
        only = Filter(kinds=frozenset({"event.appended"}))
        appended_only = messages(services, broadcaster, 0, only)
        await appended_only.__anext__()
        got: list[int] = []
        for n in range(5):
            await anyio.to_thread.run_sync(save, n)
        head = services.ledger.max_position()
        while not got or got[-1] < head:
            got.extend(frame_ids(await asyncio.wait_for(appended_only.__anext__(), 30)))
        built_before = broadcaster.derived_built
        every = messages(services, broadcaster, 0, Filter())
        await every.__anext__()
        kinds: list[str] = []

        async def read_until(position: int) -> None:
            while "session.updated" not in kinds:  # the derived messages up to ``position``
                frames = await asyncio.wait_for(every.__anext__(), 30)
                for line in frames.decode().splitlines():
                    if line.startswith("event: "):
                        kinds.append(line[7:])
                if max(frame_ids(frames)) < position:
                    kinds.clear()

        await read_until(head)  # from the log
        await anyio.to_thread.run_sync(save, 5)
        kinds.clear()
        await read_until(services.ledger.max_position())  # live
        await appended_only.aclose()
        await every.aclose()
        await broadcaster.stop()
        return built_before, kinds, broadcaster.derived_built

    try:
        built_before, kinds, built_after = asyncio.run(main())
    finally:
        services.close()
    assert built_before == 0
    assert "session.updated" in kinds
    assert built_after >= 1


def test_stream_response_sends_without_a_scope_and_keeps_the_library_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scopes: list[float | None] = []  # the library's per-frame scopes, by deadline
    library_scope = sse_module.anyio.move_on_after

    def counted(delay: float | None, *args: Any, **kwargs: Any) -> Any:
        scopes.append(delay)
        return library_scope(delay, *args, **kwargs)

    monkeypatch.setattr(sse_module.anyio, "move_on_after", counted)
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def stuck(_message: dict) -> None:
        await anyio.sleep(10)

    async def run() -> None:
        body = {"type": "http.response.body", "body": b"data: x\n\n", "more_body": True}
        await EventSourceResponse(iter(()))._send_with_timeout(send, body)
        assert scopes == [None]  # the library enters a scope per frame
        await StreamResponse(iter(()))._send_with_timeout(send, body)
        assert scopes == [None] and sent == [body, body]  # ours sends without one
        timed = StreamResponse(iter(()), send_timeout=0.05)
        with pytest.raises(SendTimeoutError):  # a set timeout still applies
            await timed._send_with_timeout(stuck, body)

    anyio.run(run)


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # edits the SQLite file
def test_a_stored_event_that_no_longer_decodes_is_sent_with_its_error(settings: Settings) -> None:
    import sqlite3
    from uuid import UUID

    services = build(settings)
    try:
        for n, payload in enumerate(_ordered_payloads()[0][:4]):
            ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), f"k{n}")
    finally:
        services.close()
    positions = log_positions(settings)
    with sqlite3.connect(settings.data_dir / "events.db") as db:  # one row's JSON broken
        db.execute("UPDATE stored_events SET state = CAST('{' AS BLOB) || state WHERE rowid = ?",
                   (positions[1],))
        (stream,) = db.execute("SELECT originator_id FROM stored_events WHERE rowid = ?",
                               (positions[1],)).fetchone()
    srv = Server(settings).start()
    try:
        reader = Reader(srv.url, after="0")

        async def read() -> None:
            task = asyncio.create_task(reader.run())
            try:
                await reader.until(lambda r: len(r.ids()) >= len(positions))
            finally:
                task.cancel()

        asyncio.run(read())
    finally:
        srv.stop()
    assert reader.ids() == positions
    data = {i: d for i, e, d in reader.received if e == "event.appended"}
    assert "cannot decode stored event" in data[positions[1]]["error"]
    assert data[positions[1]]["stream_id"] == str(UUID(str(stream)))
    assert all("raw" not in d for d in data.values())


def test_sections_are_read_without_raw_records(settings: Settings) -> None:
    # no message needs an event's raw record; clients resumed from the log would hold
    # every payload twice over (a 30 MB prompt: ~60 MB per stalled client)
    from api.sections import read_events

    services = build(settings)
    try:
        for n, payload in enumerate(_ordered_payloads()[0][:4]):
            ingest_hook(services.ledger, "claude-code", json.dumps(payload).encode(), f"k{n}")
        events = read_events(services, 0)
        assert len(events) == len(log_positions(settings))
        assert all(e.raw is None and e.digest for _, e in events)
    finally:
        services.close()


def test_a_server_shutdown_ends_open_streams_cleanly(settings: Settings) -> None:
    # SIGTERM with viewers connected: each stream ends with its last chunk (before, the
    # library cancelled them and uvicorn logged "ASGI callable returned without
    # completing response" for every one); a client then resumes from the last position.
    import threading

    srv = Server(settings).start()
    ingest = [json.dumps(p).encode() for p in _ordered_payloads()[0][:5]]
    for n, body in enumerate(ingest):
        httpx.post(srv.url + "/v1/hooks/claude-code", content=body,
                   headers={"X-Hookledger-Capture-Key": f"k{n}"}, timeout=30).raise_for_status()
    ended: list[bool] = []

    def read(after: str) -> None:
        with httpx.stream("GET", f"{srv.url}/v1/stream?after={after}", timeout=60) as r:
            for _ in r.iter_bytes():
                pass
        ended.append(True)  # the body ended (no exception: the response was completed)

    readers = [threading.Thread(target=read, args=(a,)) for a in ("0", "3")]
    for t in readers:
        t.start()
    time.sleep(1.0)
    srv.stop()
    for t in readers:
        t.join(timeout=30)
    assert srv.proc is not None and srv.proc.stderr is not None
    err = srv.proc.stderr.read().decode()
    assert "ERROR" not in err and "without completing response" not in err, err
    assert ended == [True, True]


def test_a_session_stream_reads_past_other_sessions_events_without_reading_them(
    settings: Settings, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The viewer's page of a session opens ``/v1/stream?session=ID&after=0``: the
    stream read every later event of the store to find the session's own (on 580k
    events, 34 s of server CPU for a session of 11 events). Stretches of the log with
    none of its events are now passed over: here a session with events before and after
    2,000 and more of another session's, its frames are exactly its own positions, and the
    log reads return a few sections' worth, not the stretch between."""
    from api.sections import SECTION_LIMIT
    from ledger.importer import import_paths
    from ledger.observation import session_id

    short = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    lines = short.read_bytes().splitlines(keepends=True)
    part = tmp_path / short.name
    part.write_bytes(b"".join(lines[:8]))  # the session's first records, then the rest later
    other = FIXTURES / "spotter-claude-transcripts" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    external = next(json.loads(x)["sessionId"] for x in lines if b'"sessionId"' in x)
    sid = str(session_id("claude-code", external))
    services = build(settings)
    try:
        for path in (part, other):
            import_paths(services.ledger, [path])
        part.write_bytes(b"".join(lines))
        import_paths(services.ledger, [part])
        services.runner.catch_up()
        log = services.ledger.recorder.select_notifications(start=0, limit=10**7)
        own = [n.id for n in log if str(n.originator_id) == sid]
        gap = max(b - a for a, b in itertools.pairwise(own))
        assert len(own) < SECTION_LIMIT < 4 * SECTION_LIMIT < gap  # the stretch between
        read: list[int] = []
        select = services.ledger.recorder.select_notifications

        def counted(*args: Any, **kwargs: Any) -> Any:
            found = select(*args, **kwargs)
            read.append(len(found))
            return found

        monkeypatch.setattr(services.ledger.recorder, "select_notifications", counted)

        async def main() -> list[int]:
            broadcaster = Broadcaster(services)
            await broadcaster.start()
            accept = Filter(sid, sid, kinds=frozenset({"event.appended"}))
            stream = messages(services, broadcaster, 0, accept, session=sid)
            await stream.__anext__()  # the retry hint
            got: list[int] = []
            while not got or got[-1] < own[-1]:
                got.extend(frame_ids(await asyncio.wait_for(stream.__anext__(), 30)))
            await stream.aclose()
            await broadcaster.stop()
            return got

        assert asyncio.run(main()) == own
        assert sum(read) <= 3 * SECTION_LIMIT, read
    finally:
        services.close()
