"""The live viewer under a burst of updates: main-thread long tasks. See docs/benchmarks.md.

    .venv/bin/python benchmarks/viewer_burst.py --sessions 3000 --repeats 3

A fresh data dir and a real ``hookledger serve``; Debian's Chromium (Playwright) opens
the session list, which follows ``session.updated`` over SSE. Then ``--sessions`` new
sessions arrive at once (one UserPromptSubmit each, ``POST /v1/journal``, 200 per
request), as when an import or many agents run while the viewer is open. The page's long
tasks (main thread busy > 50 ms: the page cannot answer a click) are collected by a
``PerformanceObserver`` until 3 s after the last request; reported: their count, sum and
longest, in ms. ``--page session`` opens one session's page instead and sends every
prompt to that session.

``--page session-update``: one session of ``--sessions`` prompt batches (each a prompt,
a tool call and a Stop) is recorded first; its page is opened, then ``--updates`` single
updates arrive one at a time (a tool call in the last batch), each waited for on the
page. Reported: the page's own render time per update (``window.hookledger.renderMs``:
applying the fetched ``GET /v1/sessions/{id}`` to the DOM), median and longest, in ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from api.hot_path.hook_fast import JOURNAL_CONTENT_TYPE, record_bytes, uuid7  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
OBSERVE = """() => { window.longtasks = []; new PerformanceObserver((l) => {
  for (const e of l.getEntries()) window.longtasks.push(e.duration); }).observe({ type: "longtask" }); }"""
AT = "2026-06-20T00:00:00.000Z"


def _body(session: int, n: int) -> bytes:
    return json.dumps({
        "session_id": f"00000000-0000-4000-8000-{session:012d}", "transcript_path": "/tmp/t.jsonl",
        "cwd": f"/work/p{n % 7}", "hook_event_name": "UserPromptSubmit", "prompt": f"burst {n}",
    }).encode()


def _hook(session: int, n: int, event: str) -> bytes:
    """Batch ``n`` of a session: its prompt, a Bash call (Pre/Post) or its Stop."""
    base = {"session_id": f"00000000-0000-4000-8000-{session:012d}", "transcript_path": "/tmp/t.jsonl",
            "cwd": "/work/p0", "hook_event_name": event}
    call = {"tool_name": "Bash", "tool_use_id": f"toolu_{n:08d}", "tool_input": {"command": f"make test-{n}"}}
    if event == "UserPromptSubmit":
        base["prompt"] = f"batch {n}: run the tests"
    elif event == "PreToolUse":
        base |= call
    elif event == "PostToolUse":
        base |= call | {"tool_response": {"stdout": f"ok {n}", "stderr": "", "interrupted": False}}
    return json.dumps(base).encode()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _updates(page, url: str, post, batches: int, updates: int) -> list[float]:
    """``--page session-update``: render ms of each of ``updates`` single updates."""
    events = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
    for start in range(0, batches, 50):
        post(b"".join(record_bytes("claude-code", _hook(0, n, e), uuid7(), AT)
                      for n in range(start, min(batches, start + 50)) for e in events)).raise_for_status()
    page.goto(url + "/#/session/00000000-0000-4000-8000-000000000000")
    page.wait_for_selector("#conn[data-state=live]")
    page.wait_for_function(
        "n => document.querySelectorAll('#batches .batch[data-batch]').length >= n", arg=batches, timeout=300_000)
    page.wait_for_timeout(1000)  # the renders of the page's first events are over
    times = []
    for k in range(updates):
        rendered = page.evaluate("window.hookledger.rendered")
        post(record_bytes("claude-code", _hook(0, batches + k, "PreToolUse"), uuid7(), AT)).raise_for_status()
        page.wait_for_selector(f'#batches tr[data-tool-use-id="toolu_{batches + k:08d}"]', timeout=60_000)
        page.wait_for_function("n => window.hookledger.rendered > n", arg=rendered)
        times.append(page.evaluate("window.hookledger.renderMs"))
    return times


def run_once(sessions: int, page_kind: str, updates: int = 0) -> tuple[int, float, float] | list[float]:
    """One burst; returns (long tasks, their sum ms, the longest ms); for
    ``session-update`` the render ms of each update."""
    data = Path(tempfile.mkdtemp(prefix="hookledger-burst-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    srv = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "--data-dir", str(data), "serve", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    post = lambda body: httpx.post(  # noqa: E731
        url + "/v1/journal", content=body, headers={"Content-Type": JOURNAL_CONTENT_TYPE}, timeout=120
    )
    try:
        for _ in range(300):
            try:
                httpx.get(url + "/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            if page_kind == "session-update":
                return _updates(page, url, post, sessions, updates)
            if page_kind == "session":
                post(record_bytes("claude-code", _body(0, -1), uuid7(), AT))
                page.goto(url + "/#/session/00000000-0000-4000-8000-000000000000")
            else:
                page.goto(url + "/")
            page.wait_for_selector("#conn[data-state=live]")
            page.evaluate(OBSERVE)
            for start in range(0, sessions, 200):
                chunk = range(start, min(sessions, start + 200))
                target = lambda n: 0 if page_kind == "session" else n  # noqa: E731
                r = post(b"".join(record_bytes("claude-code", _body(target(n), n), uuid7(), AT) for n in chunk))
                r.raise_for_status()
            page.wait_for_timeout(3000)
            tasks = page.evaluate("() => window.longtasks")
            browser.close()
    finally:
        srv.terminate()
        srv.wait()
        shutil.rmtree(data, ignore_errors=True)
    return len(tasks), sum(tasks), max(tasks, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--page", choices=["list", "session", "session-update"], default="list")
    ap.add_argument("--updates", type=int, default=20, help="session-update: updates per run")
    args = ap.parse_args()
    if args.page == "session-update":
        for _ in range(args.repeats):
            times = run_once(args.sessions, args.page, args.updates)
            print(f"render per update: median {statistics.median(times):.1f} ms, longest {max(times):.1f} ms "
                  f"({args.updates} updates, {args.sessions} batches)")
        return
    runs = [run_once(args.sessions, args.page) for _ in range(args.repeats)]
    for count, total, longest in runs:
        print(f"long tasks: {count}, sum {total:.0f} ms, longest {longest:.0f} ms")
    print(f"median over {args.repeats}: sum {statistics.median(r[1] for r in runs):.0f} ms, "
          f"longest {statistics.median(r[2] for r in runs):.0f} ms "
          f"({args.sessions} updates, {args.page} page)")


if __name__ == "__main__":
    main()
