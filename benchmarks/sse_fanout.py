"""CPU per delivery of the stream layer alone: the broadcaster offering one-message
sections to N subscribers and each subscriber's ``api.stream.messages`` generator
yielding its bytes, in one process, no sockets, no ledger; with ``--response``, every
frame also goes through a response class's per-frame send path to a no-op ASGI
``send`` (sse-starlette's own, or :class:`api.stream.StreamResponse`).

    .venv/bin/python benchmarks/sse_fanout.py --clients 500 --sections 200 --repeats 3
    .venv/bin/python benchmarks/sse_fanout.py --response library ours   # + the send path

Prints µs of process CPU time per (section, client) delivery for each repeat. With
``none`` this is what hookledger adds per frame on top of sse-starlette and uvicorn (see
the SSE section of docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from sse_starlette import EventSourceResponse, ServerSentEvent

from api.broadcaster import Broadcaster
from api.sections import APPENDED, Message, Section
from api.stream import Filter, StreamResponse, messages

RESPONSES = {"none": None, "library": EventSourceResponse, "ours": StreamResponse}


async def fan_out(clients: int, sections: int, response: str = "none") -> float:
    """µs of CPU per delivery for ``sections`` sections to ``clients`` subscribers.
    ``response``: also pass every frame through that response class's per-frame send
    path (``_stream_response``, to a no-op ASGI ``send``): ``library`` (sse-starlette's
    ``EventSourceResponse``) or ``ours`` (:class:`api.stream.StreamResponse`)."""
    wrap = RESPONSES[response]
    broadcaster = Broadcaster(None)  # type: ignore[arg-type]  # no log reads happen here
    accept = Filter(kinds=frozenset({APPENDED}))
    streams = [messages(None, broadcaster, 0, accept) for _ in range(clients)]  # type: ignore[arg-type]
    for stream in streams:
        await stream.__anext__()  # subscribes; the retry hint
    delivered = 0

    async def drain(stream) -> None:  # type: ignore[no-untyped-def]
        nonlocal delivered
        if wrap is None:
            async for _ in stream:
                delivered += 1
            return

        async def send(message) -> None:  # type: ignore[no-untyped-def]
            nonlocal delivered
            if message["type"] == "http.response.body":
                delivered += 1

        await wrap(stream)._stream_response(send)

    tasks = [asyncio.create_task(drain(s)) for s in streams]
    while any(s.resyncing for s in broadcaster.subscribers):
        await asyncio.sleep(0)  # every client has read the (empty) log and rejoined
    t0 = time.process_time()
    for position in range(1, sections + 1):
        frame = ServerSentEvent("x" * 300, event=APPENDED, id=str(position)).encode()
        message = Message(position, APPENDED, "s", "/p", "e", frame)
        broadcaster._publish(Section(position - 1, position, (message,)))
        while delivered < clients * position:
            await asyncio.sleep(0)
    cpu = time.process_time() - t0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return cpu / (clients * sections) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--sections", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--response", choices=sorted(RESPONSES), nargs="+", default=["none"],
                    help="also run each frame through this response's send path "
                         "(several: alternated within each repeat)")
    args = ap.parse_args()
    for _ in range(args.repeats):
        for response in args.response:
            us = asyncio.run(fan_out(args.clients, args.sections, response))
            print(f"{us:.2f} µs CPU per delivery ({args.clients} clients,"
                  f" {args.sections} sections, response: {response})")


if __name__ == "__main__":
    main()
