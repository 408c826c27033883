"""The web viewer in a real browser: Debian's Chromium driven by Playwright.

A real ``hookledger serve``; real Claude Code 2.1.170 hook payloads (session 4f65f198
of ``coorp-serverless-plugins-hook-logs``, in transcript order) POSTed over HTTP while
the page is open. The session appears in the list, its batches and tool calls fill in
without a reload, the server is stopped and restarted mid-stream (same data dir) while
posting goes on, and the page ends with exactly the session's events of the log, none
twice (the viewer's ``window.hookledger.positions`` against
``GET /v1/sessions/{id}/events``). Screenshots go to ``test-artifacts/``.

Never runs ``playwright install``: the browser is ``/usr/bin/chromium`` (apt package
``chromium``, installed by ``.ci/run`` / ``scripts/dev.py test``).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_hook_replay import _ordered_payloads

from ledger.config import Settings

from conftest import Server

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, launched once for this module's tests
    (a launch per test cost about a second each). Each test opens its page in a browser
    context of its own (:func:`_page`): its own storage, cookies and cache, as the
    browser launched for it had."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: apt-get install chromium (scripts/dev.py test does it as root)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def _page(chromium: Any, height: int = 1000) -> Iterator[Any]:
    """A 1400 x ``height`` page with the test timeout, in a new browser context of
    ``chromium``, closed afterwards."""
    context = chromium.new_context(viewport={"width": 1400, "height": height})
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        yield page
    finally:
        context.close()


def post(url: str, payload: dict[str, Any], key: str, tries: int = 600) -> dict[str, Any]:
    """POST one hook payload; retried with the same capture key while the server is down."""
    for _ in range(tries):
        try:
            r = httpx.post(
                url + "/v1/hooks/claude-code",
                json=payload,
                timeout=30,
                headers={"X-Hookledger-Capture-Key": key},
            )
            assert r.status_code == 202, r.text
            return r.json()
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"could not post {key}")


def test_viewer_live_across_restart(chromium: Any, settings: Settings, request: pytest.FixtureRequest) -> None:
    payloads, _ = _ordered_payloads()
    # Independent counts, from the payloads with plain json.
    tool_ids = {
        p["tool_use_id"] for p in payloads if p["hook_event_name"] in ("PreToolUse", "PostToolUse")
    }
    prompts = [p for p in payloads if p["hook_event_name"] == "UserPromptSubmit"]
    assert payloads[0]["hook_event_name"] == "SessionStart"
    # One more prompt, a real payload whose text is markup: it must show as text.
    hostile = copy.deepcopy(prompts[-1])
    hostile["prompt"] = '<img id="xss" src="x" onerror="window.pwned=1"><b>not bold</b>'
    payloads.append(hostile)

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name.replace("/", "_")
    srv = Server(settings).start()
    try:
        with _page(chromium) as page:
            console: list[str] = []
            page.on("console", lambda m: console.append(m.text))
            response = page.goto(srv.url + "/")
            assert response is not None
            assert "script-src" not in response.headers["content-security-policy"]
            assert "default-src 'self'" in response.headers["content-security-policy"]
            page.wait_for_selector("#conn[data-state=live]")

            # 1. the session appears in the list, live
            sid = post(srv.url, payloads[0], "viewer-0")["sessions"][0]
            row = page.wait_for_selector(f'tr.session-row[data-id="{sid}"]')
            page.screenshot(path=f"{shot}-1-list.png")
            row.click()
            page.wait_for_function("id => window.hookledger.view === id", arg=sid)

            # 2. batches and tool calls fill in without a reload
            third = len(payloads) // 3
            for n in range(1, third):
                post(srv.url, payloads[n], f"viewer-{n}")
            page.wait_for_selector("#batches .batch[data-batch='1']")
            page.wait_for_selector("#batches tr[data-tool-use-id]")
            page.screenshot(path=f"{shot}-2-session.png", full_page=True)

            # 3. restart the server mid-stream while posting goes on
            def post_rest() -> None:
                for n in range(third, len(payloads)):
                    post(srv.url, payloads[n], f"viewer-{n}")
                    time.sleep(0.02)

            poster = threading.Thread(target=post_rest)
            poster.start()
            time.sleep(0.5)
            srv.stop()
            page.wait_for_selector("#conn[data-state=reconnecting]")
            srv.start()
            poster.join(timeout=300)
            assert not poster.is_alive()

            # 4. the page catches up: exactly the session's events of the log, none twice
            log = [
                e["position"]
                for e in httpx.get(f"{srv.url}/v1/sessions/{sid}/events").json()["events"]
            ]
            page.wait_for_function("n => window.hookledger.positions.length >= n", arg=len(log))
            detail = httpx.get(f"{srv.url}/v1/sessions/{sid}").json()
            page.wait_for_function(
                "n => document.querySelectorAll('#batches tr[data-tool-use-id]').length === n",
                arg=len(detail["tool_calls"]),
            )
            page.wait_for_function(
                "n => document.querySelectorAll("
                "'#batches .batch[data-batch]:not([data-batch=\"0\"])').length === n",
                arg=len(detail["batches"]),
            )
            page.wait_for_timeout(1000)  # anything duplicated would arrive now
            seen = page.evaluate("window.hookledger")
            # the server's own workers (summaries, jobs) may have appended since ``log``
            # was read: compare with the log as it is now, up to the last position seen
            log_now = [
                e["position"]
                for e in httpx.get(f"{srv.url}/v1/sessions/{sid}/events").json()["events"]
            ]
            page.screenshot(path=f"{shot}-3-after-restart.png", full_page=True)
            shown_prompts = page.locator("#batches .batch .prompt").all_text_contents()
            xss = page.locator("#xss").count()
            pwned = page.evaluate("window.pwned === 1")
    finally:
        srv.stop()

    assert set(log) <= set(seen["positions"])  # caught up with the log read before
    assert seen["positions"] == [p for p in log_now if p <= max(seen["positions"])]
    assert seen["duplicates"] == 0
    assert seen["connects"] >= 2  # it really reconnected
    assert len(detail["tool_calls"]) == len(tool_ids)
    # 3 prompt batches in the fixture's hooks (as test_hook_replay finds: the /prime prompt
    # command is one since it counts as a human prompt) + the markup one
    assert len(detail["batches"]) == 4
    assert hostile["prompt"] in shown_prompts
    assert xss == 0 and not pwned
    assert seen["positions"] == sorted(set(seen["positions"]))
    # the page runs under its Content-Security-Policy without a violation
    assert not [m for m in console if "Content Security Policy" in m], console


def test_viewer_asks_for_the_token(chromium: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Against a server with ``HOOKLEDGER_TOKEN``: a browser holding an old token is told
    it was refused (not just asked again); the right one is kept in localStorage and
    sent as ``?token=`` on API and stream URLs. The page's own files need no token and
    nothing on it fails to load (the icon included)."""

    ARTIFACTS.mkdir(exist_ok=True)
    srv = Server(Settings(tmp_path / "data"), env={"HOOKLEDGER_TOKEN": "secret"}).start()
    seen: list[str] = []
    failed: list[str] = []
    try:
        r = httpx.post(srv.url + "/v1/hooks/claude-code", json=_ordered_payloads()[0][0],
                       headers={"Authorization": "Bearer secret"}, timeout=30)
        sid = r.json()["sessions"][0]
        with _page(chromium) as page:
            page.on("request", lambda req: seen.append(req.url))
            page.on("response", lambda resp: failed.append(resp.url) if resp.status >= 400 else None)
            page.goto(srv.url + "/")
            page.evaluate("() => localStorage.setItem('hookledger_token', 'last-months-token')")
            page.reload()
            page.wait_for_selector("#token-form:not([hidden])")
            why = page.text_content("#token-why") or ""
            conn = page.text_content("#conn")
            page.screenshot(path=str(ARTIFACTS / "viewer-token-form.png"))
            page.fill("#token-input", "secret")
            page.click("#token-form button")
            page.wait_for_selector(f'tr.session-row[data-id="{sid}"]')
            page.wait_for_selector("#conn[data-state=live]")
            stored = page.evaluate("() => localStorage.getItem('hookledger_token')")
    finally:
        srv.stop()
    assert "refused" in why and conn == "token refused"
    assert stored == "secret"
    assert any("/v1/stream?" in u and "token=secret" in u for u in seen)
    assert any("/v1/sessions?" in u and "token=secret" in u for u in seen)
    # only API calls without the current token failed: no page file, no icon
    assert failed and all("/v1/" in u and "token=secret" not in u for u in failed), failed


def test_viewer_shows_a_batch_summary_live_and_escaped(chromium: Any, settings: Settings, request: pytest.FixtureRequest) -> None:
    """A batch closed by a Stop hook gets its summary from the server's worker; the open
    session page shows it without a reload, with markup in the prompt shown as text."""

    base = {"session_id": "viewer-summary-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp/proj"}
    edit = {"file_path": "/tmp/proj/<b>app</b>.py", "old_string": "a", "new_string": "b"}
    hooks = [
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": "fix <i>it</i>"},
        {**base, "hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_use_id": "e1", "tool_input": edit},
        {**base, "hook_event_name": "PostToolUse", "tool_name": "Edit", "tool_use_id": "e1", "tool_input": edit,
         "tool_response": {"filePath": edit["file_path"]}},
        {**base, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "b1",
         "tool_input": {"command": "make test"}},
        {**base, "hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "tool_use_id": "b1",
         "tool_input": {"command": "make test"}, "error": "Exit code 2\nboom"},
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name.replace("/", "_")
    srv = Server(settings, env={"HOOKLEDGER_SUMMARIES_INTERVAL_S": "0.3"}).start()
    try:
        sid = ""
        for n, h in enumerate(hooks):
            sid = post(srv.url, h, f"summary-{n}")["sessions"][0]
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/session/{sid}")
            page.wait_for_selector("#batches .batch[data-batch='1']")
            assert page.locator(".summary").count() == 0  # the batch is still open
            post(srv.url, {**base, "hook_event_name": "Stop", "stop_hook_active": False}, "summary-stop")
            block = page.wait_for_selector(".summary[data-summary='batch:1']")
            text = block.inner_text()
            assert "make test" in text and "/tmp/proj/<b>app</b>.py" in text
            assert page.locator(".summary li[data-kind=gotcha]").count() == 1
            assert page.locator(".summary b, .summary i").count() == 0  # markup stayed text
            page.screenshot(path=f"{shot}-summary.png")
    finally:
        srv.stop()


def test_viewer_search_finds_a_prompt_shows_it_as_text_and_opens_its_session(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    """The header's search box: a prompt sent by a hook is found by one of its words,
    the match is highlighted, markup in it stays text, and a click opens the session."""

    base = {"session_id": "viewer-search-1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp/proj"}
    prompt = 'tidy the <img id="xss" src="x" onerror="window.pwned=1"> gravlaxifier module'
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name.replace("/", "_")
    srv = Server(settings).start()
    try:
        sid = post(srv.url, {**base, "hook_event_name": "UserPromptSubmit", "prompt": prompt}, "search-1")["sessions"][0]
        with _page(chromium, height=900) as page:
            page.goto(f"{srv.url}/")
            page.fill("#search-input", "gravlaxifier")
            page.press("#search-input", "Enter")
            hit = page.wait_for_selector("#hits li.hit[data-kind=prompt]")
            assert hit.get_attribute("data-session") == sid
            assert page.locator("#hits mark").all_inner_texts() == ["gravlaxifier"]
            assert "<img" in hit.inner_text()
            assert page.locator("#hits img, #xss").count() == 0
            assert page.evaluate("window.pwned") is None
            page.screenshot(path=f"{shot}-search.png")
            hit.click()
            page.wait_for_url(f"**/#/session/{sid}")
            page.wait_for_selector("#batches .batch[data-batch='1']")
    finally:
        srv.stop()


def test_live_list_keeps_the_servers_order(chromium: Any, settings: Settings, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # A session whose last activity is older than every row of page 1 must not jump to
    # the top when it arrives live (an import of an old transcript), and a live page
    # must show the rows the server lists, in its order.
    import json
    import re

    from conftest import FIXTURES, cli

    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts"))
    old = tmp_path / "old.jsonl"
    text = (FIXTURES / "spotter-claude-transcripts" / "short.jsonl").read_text()
    text = text.replace("55604662-cf2a-4331-851a-ec234028f8ca", "00000000-0000-4000-8000-000000002024")
    old.write_text(re.sub(r'"timestamp":"2026-', '"timestamp":"2024-', text))
    ARTIFACTS.mkdir(exist_ok=True)
    srv = Server(settings).start()
    try:
        with _page(chromium) as page:
            page.goto(srv.url + "/")
            page.wait_for_selector("#conn[data-state=live]")
            page.wait_for_selector("tr.session-row")
            cli(settings, "import", str(old))
            listed = httpx.get(f"{srv.url}/v1/sessions?limit=50").json()["sessions"]
            newcomer = next(s for s in listed if s["external_id"].endswith("2024"))
            page.wait_for_selector(f'tr.session-row[data-id="{newcomer["id"]}"]')
            page.wait_for_timeout(500)  # any further update would arrive now
            shown = page.evaluate("[...document.querySelectorAll('tr.session-row')].map(r => r.dataset.id)")
            page.screenshot(path=str(ARTIFACTS / (request.node.name + ".png")))
    finally:
        srv.stop()
    listed = [s["id"] for s in json.loads(cli(settings, "sessions", "--json").stdout)]
    assert shown == listed[: len(shown)]
    assert shown[-1] == newcomer["id"], "the oldest activity is listed last"


def test_a_session_update_keeps_the_readers_scroll_and_selection(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    # a busy session re-renders on every event: an output the reader scrolled or is
    # selecting text in must stay as it is

    from conftest import FIXTURES, cli

    ref = "258c7280-ae70-4798-800f-63464d01a85d"
    cli(settings, "import", str(FIXTURES / "spotter-claude-transcripts" / f"{ref}.jsonl"))
    note = {"session_id": ref, "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
            "hook_event_name": "Notification", "message": "Claude needs your permission"}
    srv = Server(settings).start()
    try:
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/session/{ref}")
            page.wait_for_selector("#batches tr[data-tool-use-id]")
            # open the first output taller than its box, and scroll it
            page.evaluate("""() => {
                for (const d of document.querySelectorAll('#batches details[data-key^="out:"]')) d.open = true;
            }""")
            page.wait_for_selector('#batches details[data-key^="out:"] > pre')
            key = page.evaluate("""() => {
                for (const pre of document.querySelectorAll('#batches details[data-key^="out:"] > pre')) {
                    if (pre.scrollHeight > pre.clientHeight + 200) { pre.scrollTop = 150; return pre.parentElement.dataset.key; }
                }
                return null;
            }""")
            assert key, "a fixture output taller than its box"
            top = "k => document.querySelector(`details[data-key=\"${k}\"] > pre`).scrollTop"
            rendered = page.evaluate("window.hookledger.rendered")
            post(srv.url, note, "note-1")
            page.wait_for_function("n => window.hookledger.rendered > n", arg=rendered)
            assert page.evaluate(top, key) == 150
            # select text in it: the next update waits for the selection to end
            page.evaluate(f"""() => {{
                const pre = document.querySelector('details[data-key="{key}"] > pre');
                document.getSelection().selectAllChildren(pre);
            }}""")
            rendered = page.evaluate("window.hookledger.rendered")
            events = page.evaluate("window.hookledger.positions.length")
            post(srv.url, {**note, "message": "again"}, "note-2")
            page.wait_for_function("n => window.hookledger.positions.length > n", arg=events)
            page.wait_for_timeout(600)  # the re-render would have happened by now
            assert page.evaluate("document.getSelection().toString().length") > 0
            assert page.evaluate("window.hookledger.rendered") == rendered
            page.evaluate("document.getSelection().removeAllRanges()")
            page.wait_for_function("n => window.hookledger.rendered > n", arg=rendered)
            page.screenshot(path=str(ARTIFACTS / (request.node.name + ".png")))
    finally:
        srv.stop()


def test_a_burst_of_new_sessions_leaves_page_one_as_the_server_lists_it(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    # 120 sessions arrive in one request (more than a page within one frame): the page
    # applies them once per frame, skipping those that cannot be on page 1, and must end
    # showing exactly the server's page 1, in its order.
    import json

    from api.hot_path.hook_fast import record_bytes, uuid7

    def body(i: int) -> bytes:
        return json.dumps({
            "session_id": f"00000000-0000-4000-8000-{i:012d}", "transcript_path": "/tmp/t.jsonl",
            "cwd": f"/work/burst{i % 3}", "hook_event_name": "UserPromptSubmit", "prompt": f"burst {i}",
        }).encode()

    srv = Server(settings).start()
    try:
        post(srv.url, json.loads(body(1000)), "first")
        with _page(chromium) as page:
            page.goto(srv.url + "/")
            page.wait_for_selector("#conn[data-state=live]")
            page.wait_for_selector("tr.session-row")
            journal = b"".join(
                record_bytes("claude-code", body(i), uuid7(), f"2026-06-20T00:{i // 60:02d}:{i % 60:02d}.000Z")
                for i in range(120)
            )
            r = httpx.post(srv.url + "/v1/journal", content=journal, timeout=60,
                           headers={"Content-Type": "application/x-hookledger-journal"})
            assert r.status_code == 202 and r.json()["records"] == 120, r.text
            listed = [s["id"] for s in httpx.get(f"{srv.url}/v1/sessions?limit=50").json()["sessions"]]
            deadline = time.monotonic() + TIMEOUT_MS / 1000
            while time.monotonic() < deadline:
                shown = page.evaluate("() => [...document.querySelectorAll('tr.session-row')].map(r => r.dataset.id)")
                if shown == listed:
                    break
                page.wait_for_timeout(100)
            page.screenshot(path=str(ARTIFACTS / (request.node.name + ".png")))
    finally:
        srv.stop()
    assert shown == listed


def _task_calls(transcript: Path) -> list[dict[str, Any]]:
    """The Task tool_use blocks of a Claude Code transcript, read with plain json."""
    import json

    found = []
    for line in transcript.read_text().splitlines():
        record = json.loads(line)
        content = (record.get("message") or {}).get("content")
        if record.get("type") == "assistant" and isinstance(content, list):
            found += [c for c in content if c.get("type") == "tool_use" and c.get("name") == "Task"]
    return found


def test_subagents_are_marked_in_the_list_and_linked_both_ways(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    # A real Claude Code session with two subagent runs (a Task subagent and a compaction
    # agent): in the list each child reads as a subagent of its parent, with a link; the
    # parent's page lists them and links the Task call to the run it spawned; the child's
    # page, opened by its external id (which holds a "/"), names its parent and the call.

    from conftest import FIXTURES, cli

    ref = "258c7280-ae70-4798-800f-63464d01a85d"
    folder = FIXTURES / "spotter-claude-transcripts"
    (task,) = _task_calls(folder / f"{ref}.jsonl")
    cli(settings, "import", str(folder))
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name
    srv = Server(settings).start()
    try:
        listed = {s["external_id"]: s for s in httpx.get(f"{srv.url}/v1/sessions?limit=100").json()["sessions"]}
        parent = listed[ref]
        spawned = listed[f"{ref}/agent-a881341"]
        compact = listed[f"{ref}/agent-acompact-fffbd0"]
        with _page(chromium) as page:
            page.goto(srv.url + "/")
            page.wait_for_selector(f'tr.session-row[data-id="{spawned["id"]}"]')
            page.screenshot(path=f"{shot}-list.png")
            rows = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('tr.session-row')].map(
                r => [r.dataset.id, {child: r.classList.contains('child'), text: r.innerText,
                      link: r.querySelector('.lineage a')?.getAttribute('href') ?? null}]))""")
            # a click on the parent link opens the parent, not the child's row
            page.click(f'tr.session-row[data-id="{spawned["id"]}"] .lineage a')
            page.wait_for_function("id => window.hookledger.view === id", arg=parent["id"])
            page.wait_for_selector("#subagents tbody tr")
            page.wait_for_selector("#batches tr[data-tool-use-id] .spawned a")
            subagent_links = page.eval_on_selector_all(
                "#subagents tbody tr a", "as => as.map(a => a.getAttribute('href'))")
            call_links = page.evaluate("""() => [...document.querySelectorAll('#batches tr[data-tool-use-id]')]
                .filter(r => r.querySelector('.spawned a'))
                .map(r => [r.dataset.toolUseId, r.querySelector('.spawned a').getAttribute('href')])""")
            parent_totals = page.inner_text("#session-totals")
            page.screenshot(path=f"{shot}-parent.png")
            # the child by its external id, as the agent names it
            page.goto(f"{srv.url}/#/session/{ref}/agent-a881341")
            page.wait_for_selector("#lineage:not([hidden]) a")
            page.wait_for_selector("#batches .batch[data-batch='1']")
            lineage = page.inner_text("#lineage")
            lineage_link = page.get_attribute("#lineage a", "href")
            prompt = page.inner_text("#batches .batch[data-batch='1'] .prompt")
            page.screenshot(path=f"{shot}-child.png")
    finally:
        srv.stop()
    assert rows[parent["id"]] == {**rows[parent["id"]], "child": False, "link": None}
    for child in (spawned, compact):
        assert rows[child["id"]]["child"]
        assert rows[child["id"]]["link"] == f"#/session/{parent['id']}"
        # its own id, not the parent's first characters
        assert child["external_id"].rsplit("/", 1)[1] in rows[child["id"]]["text"]
    # the type of the Task call that spawned it (the run's own records name none)
    assert "subagent (claude-code-guide) of" in rows[spawned["id"]]["text"]
    assert "subagent (compact) of" in rows[compact["id"]]["text"]
    assert sorted(subagent_links) == sorted(f"#/session/{c['id']}" for c in (spawned, compact))
    assert call_links == [[task["id"], f"#/session/{spawned['id']}"]]
    assert "with 2 subagents" in parent_totals
    assert lineage_link == f"#/session/{parent['id']}"
    assert ref in lineage and "spawned by Task" in lineage and task["input"]["description"] in lineage
    assert prompt == task["input"]["prompt"]


def _shown_number(text: str, label: str) -> str:
    """The figure after ``label`` in a totals line (``prompts 12 · tool calls …``)."""
    import re

    m = re.search(re.escape(label) + r" ([^·\n]+)", text)
    assert m, (label, text)
    return m.group(1).strip()


def test_totals_on_the_list_and_the_session_page_and_the_agent_filter(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    # Three agents' real sessions: the list's totals line sums every session the filters
    # match (not just the page), the agent filter offers the agents there are and lists
    # exactly that agent's sessions, a session of a new agent arriving live updates both,
    # and a session page heads with its own totals.

    from conftest import FIXTURES, cli

    for folder in ("spotter-claude-transcripts", "agentcmd-codex-rollouts", "agentcmd-gemini-sessions"):
        cli(settings, "import", str(FIXTURES / folder))
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name
    srv = Server(settings).start()

    def sessions(**filters: str) -> list[dict[str, Any]]:
        q = "&".join(f"{k}={v}" for k, v in filters.items())
        return httpx.get(f"{srv.url}/v1/sessions?limit=1000&{q}").json()["sessions"]

    def expect(rows: list[dict[str, Any]]) -> dict[str, str]:
        total = lambda k: sum(r[k] for r in rows)  # noqa: E731
        return {
            "sessions": f"{len(rows):,}",
            "prompts": f"{total('prompt_count'):,}",
            "tokens in / out": f"{total('input_tokens'):,} / {total('output_tokens'):,}",
            "cache write / read": f"{total('cache_creation_input_tokens'):,} / {total('cache_read_input_tokens'):,}",
            "cost": f"${total('cost_usd'):.2f}",
        }

    def shown(text: str) -> dict[str, str]:
        return {
            "sessions": text.split(" session")[0].strip(),
            **{k: _shown_number(text, k) for k in ("prompts", "tokens in / out", "cache write / read", "cost")},
        }

    try:
        everything = sessions()
        codex = sessions(agent="codex")
        with _page(chromium) as page:
            page.goto(srv.url + "/")
            page.wait_for_selector("#conn[data-state=live]")
            page.wait_for_selector("#totals [data-total=cost]")
            all_totals = page.inner_text("#totals")
            options = page.eval_on_selector_all("#agent-filter option", "os => os.map(o => o.value)")
            page.select_option("#agent-filter", "codex")
            page.wait_for_function("() => location.hash.includes('agent=codex')")
            page.wait_for_function(
                "n => document.querySelectorAll('tr.session-row').length === n", arg=len(codex))
            page.wait_for_function("t => document.querySelector('#totals').innerText !== t", arg=all_totals)
            codex_totals = page.inner_text("#totals")
            codex_rows = page.eval_on_selector_all("tr.session-row", "rs => rs.map(r => r.dataset.id)")
            page.screenshot(path=f"{shot}-codex.png")
            # a new agent's session arrives live: it is offered, and the totals count it
            page.select_option("#agent-filter", "")
            page.wait_for_function("t => document.querySelector('#totals').innerText === t", arg=all_totals)
            hook = {"session_id": "totals-live-1", "cwd": "/tmp/live", "hook_event_name": "beforeSubmitPrompt",
                    "prompt": "count me", "conversation_id": "totals-live-1", "generation_id": "g1",
                    "workspace_roots": ["/tmp/live"]}
            r = httpx.post(srv.url + "/v1/hooks/cursor", json=hook, timeout=30)
            assert r.status_code == 202, r.text
            page.wait_for_selector("#agent-filter option[value=cursor]", state="attached")
            page.wait_for_function("t => document.querySelector('#totals').innerText !== t", arg=all_totals)
            live_totals = page.inner_text("#totals")
            after = sessions()
            # one session's page: its own totals
            top = max(everything, key=lambda s: s["tool_call_count"])
            page.goto(f"{srv.url}/#/session/{top['id']}")
            page.wait_for_selector("#batches .batch[data-batch='1']")
            session_totals = page.inner_text("#session-totals")
            page.screenshot(path=f"{shot}-session.png")
    finally:
        srv.stop()
    assert options == ["", *sorted({s["agent"] for s in everything})]
    assert shown(all_totals) == expect(everything)
    assert codex_rows == [s["id"] for s in codex] and {s["agent"] for s in codex} == {"codex"}
    assert shown(codex_totals) == expect(codex)
    assert len(after) == len(everything) + 1
    assert shown(live_totals) == expect(after)
    assert _shown_number(session_totals, "prompts") == f"{top['prompt_count']:,}"
    calls = f"{top['tool_call_count']:,}" + (f" ({top['tool_error_count']:,} failed)" if top["tool_error_count"] else "")
    assert _shown_number(session_totals, "tool calls") == calls
    assert _shown_number(session_totals, "tokens in / out") == f"{top['input_tokens']:,} / {top['output_tokens']:,}"
    assert _shown_number(session_totals, "cost") == f"${top['cost_usd']:.2f}"
    assert _shown_number(session_totals, "duration") not in ("", "–")


def test_the_session_page_shows_slash_commands_in_their_batch(
    chromium: Any, settings: Settings, request: pytest.FixtureRequest
) -> None:
    # /clear is no prompt (it opens no batch) but the reader sees it where it was typed
    from test_batch_inputs import TWO, _expected, _session_ids

    from conftest import cli

    expected = _expected(TWO)
    (sid,) = _session_ids(TWO)
    cli(settings, "import", str(TWO))
    srv = Server(settings).start()
    try:
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/session/{sid}")
            page.wait_for_selector("#batches .input")
            shown = page.evaluate("""() => [...document.querySelectorAll('#batches .input')].map(
                li => [li.dataset.kind, li.querySelector('code').textContent,
                       li.closest('.batch').dataset.batch])""")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=f"{ARTIFACTS / request.node.name}.png")
        inputs = httpx.get(f"{srv.url}/v1/sessions/{sid}").json()["inputs"]
    finally:
        srv.stop()
    assert [(k, t) for k, t, _ in shown] == expected
    assert [b for _, _, b in shown] == [str(i["batch"]) for i in inputs]


def test_a_parent_page_follows_its_subagent_run_live(
    settings: Settings, request: pytest.FixtureRequest, chromium: Any
) -> None:
    # Real hooks of session 4f65f198 (Claude Code 2.1.170): the parent's page is open (by
    # the agent's session id) when one of its subagent runs makes its first tool call
    # (hooks with agent_id: the child session's events, none on the parent's stream),
    # then nine more, then stops. The run appears in the subagents list, and its row (the
    # same <tr>) and the totals with subagents follow its tool calls without a reload.
    from test_hook_replay import SESSION, _subagent_payloads

    payloads, _ = _ordered_payloads()
    tools, stop = _subagent_payloads("ab697ae37d23fb555")
    row = "id => document.querySelector(`#subagents tr[data-id=\"${id}\"]`)"
    cell = "([id, n]) => (" + row + ")(id)?.children[n]?.textContent.trim()"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / request.node.name
    srv = Server(settings).start()
    try:
        sid = post(srv.url, payloads[0], "sub-start")["sessions"][0]
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/session/{SESSION}")
            page.wait_for_selector("#conn[data-state=live]")
            page.wait_for_function("n => window.hookledger.positions.length >= n", arg=2)  # Opened, Started
            page.evaluate("() => { window.notReloaded = true; }")
            # the run's first tool call: a new subagent appears
            (child,) = post(srv.url, tools[0], "sub-tool-0")["sessions"]
            page.wait_for_selector(f'#subagents tr[data-id="{child}"]')
            page.evaluate(f"id => {{ ({row})(id).kept = true; }}", child)
            # nine more: the row follows (tool calls are column 6)
            for n, hook in enumerate(tools[1:], 1):
                post(srv.url, hook, f"sub-tool-{n}")
            running = httpx.get(f"{srv.url}/v1/sessions/{child}").json()
            page.wait_for_function(f"a => ({cell})(a) === a[2]", arg=[child, 5, f"{running['tool_call_count']:,}"])
            with_subagents = page.inner_text("#session-totals [data-total='with subagents']")
            page.screenshot(path=f"{shot}-running.png")
            # its SubagentStop: completed
            post(srv.url, stop, "sub-stop")
            page.wait_for_function(f"a => ({cell})(a) === a[2]", arg=[child, 0, "COMPLETED"])
            kept = page.evaluate(f"id => ({row})(id).kept === true", child)
            reloaded = page.evaluate("() => window.notReloaded !== true")
            page.screenshot(path=f"{shot}-stopped.png")
        parent = httpx.get(f"{srv.url}/v1/sessions/{sid}").json()
    finally:
        srv.stop()
    assert running["tool_call_count"] == 10 and running["parent_id"] == sid
    assert [c["id"] for c in parent["subagents"]] == [child]
    assert kept and not reloaded  # updated in place
    # the parent made no tool call: the sums with its subagent are the run's
    assert with_subagents.startswith("with 1 subagent")
    assert f"{parent['prompt_count']:,} prompts · {running['tool_call_count']:,} tool calls" in with_subagents


def test_a_live_update_of_one_batch_leaves_the_other_batches_nodes_alone(
    settings: Settings, request: pytest.FixtureRequest, chromium: Any
) -> None:
    # A session with a few hundred prompt batches: the real hooks of session 4f65f198
    # (its two batches with their tool calls), then its real prompts (numbered) and Stop
    # hooks again (150 more batches, one journal request), then one more prompt. With the page open,
    # one tool call arrives for the open batch; its input is markup. Every element of the
    # batches is marked before: afterwards only the new row (and that batch's header) are
    # new elements, every other batch is the same nodes, and the input shows as text.
    import json
    from datetime import UTC, datetime, timedelta

    from api.hot_path.hook_fast import JOURNAL_CONTENT_TYPE, record_bytes, uuid7

    payloads, _ = _ordered_payloads()
    # the typed prompts (a slash command or a task notification opens no batch)
    prompts = [p for p in payloads if p["hook_event_name"] == "UserPromptSubmit" and not p["prompt"].startswith(("/", "<"))]
    stops = [p for p in payloads if p["hook_event_name"] == "Stop"]
    pre = next(p for p in payloads if p["hook_event_name"] == "PreToolUse")
    markup = '<img id="xss" src="x" onerror="window.pwned=1"><b>not bold</b>'
    live_call = {**pre, "tool_use_id": "toolu_viewer_live_1", "tool_name": "Bash", "tool_input": {"command": markup}}
    # a prompt repeated word for word is the same prompt seen again: each gets a number
    again = lambda n: {**prompts[n % len(prompts)], "prompt": f"{prompts[n % len(prompts)]['prompt']} (again {n})"}  # noqa: E731
    more = [hook for n in range(150) for hook in (again(n), stops[n % len(stops)])]
    more.append(again(150))
    # no summary worker: nothing but the posted call may change the batches meanwhile
    srv = Server(settings, env={"HOOKLEDGER_SUMMARIES_INTERVAL_S": "0"}).start()
    try:
        for n, hook in enumerate(payloads):
            sid = post(srv.url, hook, f"big-{n}")["sessions"][0]
        # captured after the hooks above, a millisecond apart, in order
        now = datetime.now(UTC)
        journal = b"".join(
            record_bytes("claude-code", json.dumps(h).encode(), uuid7(),
                         (now + timedelta(milliseconds=n + 1)).isoformat(timespec="milliseconds").replace("+00:00", "Z"))
            for n, h in enumerate(more)
        )
        r = httpx.post(srv.url + "/v1/journal", content=journal, timeout=120,
                       headers={"Content-Type": JOURNAL_CONTENT_TYPE})
        assert r.status_code == 202, r.text
        log = httpx.get(f"{srv.url}/v1/sessions/{sid}/events").json()["events"]
        detail = httpx.get(f"{srv.url}/v1/sessions/{sid}").json()
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/session/{sid}")
            # the page shows the final state: every event received, every batch and call
            page.wait_for_function("n => window.hookledger.positions.length >= n", arg=len(log))
            page.wait_for_function(
                "([b, c]) => document.querySelectorAll('#batches .batch[data-batch]:not([data-batch=\"0\"])').length === b"
                " && document.querySelectorAll('#batches tr[data-tool-use-id]').length === c",
                arg=[len(detail["batches"]), len(detail["tool_calls"])],
            )
            page.evaluate("() => { for (const n of document.querySelectorAll('#batches, #batches *')) n.kept = true; }")
            post(srv.url, live_call, "big-live")
            page.wait_for_selector('#batches tr[data-tool-use-id="toolu_viewer_live_1"]')
            fresh = page.evaluate("""() => {
                const made = [...document.querySelectorAll('#batches *')].filter((n) => !n.kept);
                return {
                    batches: [...new Set(made.map((n) => n.closest('.batch').dataset.batch))],
                    rows: made.filter((n) => n.matches('tr[data-tool-use-id]')).map((n) => n.dataset.toolUseId),
                    kept: [...document.querySelectorAll('#batches .batch')].every((b) => b.kept),
                };
            }""")
            page.click('#batches details[data-key="in:toolu_viewer_live_1"] > summary')
            shown = page.inner_text('#batches details[data-key="in:toolu_viewer_live_1"] > pre')
            xss = page.locator("#xss, #batches b").count()
            pwned = page.evaluate("window.pwned === 1")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    finally:
        srv.stop()
    last = detail["batches"][-1]["batch"]
    assert len(detail["batches"]) > 150 and detail["batches"][-1]["status"] != "completed"
    assert fresh == {"batches": [str(last)], "rows": ["toolu_viewer_live_1"], "kept": True}
    assert json.loads(shown) == {"command": markup} and xss == 0 and not pwned


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # the page's fetching: no store path
def test_a_burst_of_updates_on_a_large_session_fetches_its_detail_one_at_a_time(
    settings: Settings, request: pytest.FixtureRequest, chromium: Any
) -> None:
    # A session of about 3,000 tool calls: the real hooks of session 4f65f198 (its
    # prompts, tool calls and Stops) again and again, each round's tool_use_ids and
    # prompts numbered; its detail is about 18 MB. With its page open, 200 more real
    # tool hooks arrive one by one. The page fetched GET /v1/sessions/{id} 150 ms after
    # an update whether or not its last fetch had answered: 11 fetches (205 MB) in one
    # such burst, several in flight at once. Now one at a time, the next after the
    # answer; and the page still ends with every row the server has, none twice.
    import json
    from datetime import UTC, datetime, timedelta

    from api.hot_path.hook_fast import JOURNAL_CONTENT_TYPE, record_bytes, uuid7

    payloads, _ = _ordered_payloads()
    tools = [p for p in payloads if p["hook_event_name"] in ("PreToolUse", "PostToolUse")]
    calls = len({p["tool_use_id"] for p in tools})

    def numbered(p: dict[str, Any], tag: str) -> dict[str, Any]:
        q = dict(p)
        if "tool_use_id" in q:
            q["tool_use_id"] = f"{q['tool_use_id']}_{tag}"
        if q["hook_event_name"] == "UserPromptSubmit" and not q["prompt"].startswith(("/", "<")):
            q["prompt"] = f"{q['prompt']} ({tag})"
        return q

    rounds = [
        numbered(p, f"r{r}") for r in range(1, 3000 // calls + 1) for p in payloads
        if p["hook_event_name"] not in ("SessionStart", "SessionEnd")
    ]
    burst = [numbered(p, f"burst{n // len(tools)}") for n, p in enumerate(tools * (200 // len(tools) + 1))][:200]
    srv = Server(settings, env={"HOOKLEDGER_SUMMARIES_INTERVAL_S": "0"}).start()
    try:
        now = datetime.now(UTC) - timedelta(hours=1)  # before the burst's own capture times
        hooks = payloads + rounds
        for start in range(0, len(hooks), 500):
            journal = b"".join(
                record_bytes("claude-code", json.dumps(h).encode(), uuid7(),
                             (now + timedelta(milliseconds=start + n)).isoformat(timespec="milliseconds").replace("+00:00", "Z"))
                for n, h in enumerate(hooks[start:start + 500])
            )
            r = httpx.post(srv.url + "/v1/journal", content=journal, timeout=300,
                           headers={"Content-Type": JOURNAL_CONTENT_TYPE})
            assert r.status_code == 202, r.text
        sid = httpx.get(srv.url + "/v1/sessions?limit=1").json()["sessions"][0]["id"]
        before = httpx.get(f"{srv.url}/v1/sessions/{sid}", timeout=60).json()
        with _page(chromium) as page:
            page.set_default_timeout(300_000)
            detail_url = f"{srv.url}/v1/sessions/{sid}"
            fetches: list[str] = []  # "start" / "end" of each detail request, in order
            page.on("request", lambda r: fetches.append("start") if r.url == detail_url else None)
            page.on("requestfinished", lambda r: fetches.append("end") if r.url == detail_url else None)
            page.on("requestfailed", lambda r: fetches.append("end") if r.url == detail_url else None)
            page.goto(f"{srv.url}/#/session/{sid}")
            page.wait_for_function("n => document.querySelectorAll('#batches tr[data-tool-use-id]').length >= n",
                                   arg=len(before["tool_calls"]))
            loaded = len(fetches)
            with httpx.Client(base_url=srv.url, timeout=60) as client:
                for n, hook in enumerate(burst):
                    r = client.post("/v1/hooks/claude-code", json=hook, headers={"X-Hookledger-Capture-Key": f"burst-{n}"})
                    assert r.status_code == 202, r.text
                    time.sleep(0.03)  # hooks of a busy agent, not one request
            after = httpx.get(detail_url, timeout=60).json()
            page.wait_for_function(
                "n => document.querySelectorAll('#batches tr[data-tool-use-id]').length === n", arg=len(after["tool_calls"]))
            page.wait_for_function("() => window.hookledger.positions.length >= 1")
            shown = page.evaluate("() => [...document.querySelectorAll('#batches tr[data-tool-use-id]')].map((r) => r.dataset.toolUseId)")
            duplicates = page.evaluate("window.hookledger.duplicates")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    finally:
        srv.stop()
    assert len(before["tool_calls"]) >= 3000
    in_flight = most = 0
    for f in fetches:
        in_flight += 1 if f == "start" else -1
        most = max(most, in_flight)
    assert most == 1, fetches
    assert fetches[loaded:].count("start") >= 1  # the burst was fetched, once at least
    assert sorted(shown) == sorted(str(c["tool_use_id"]) for c in after["tool_calls"])
    assert len(shown) == len(set(shown)) == len(before["tool_calls"]) + len({h["tool_use_id"] for h in burst})
    assert duplicates == 0


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # layout and escaping: no store path
def test_long_lines_and_markup_stay_text_inside_the_page_width(
    settings: Settings, request: pytest.FixtureRequest, chromium: Any
) -> None:
    # A real prompt payload whose prompt closes a script and holds a 300,000-character
    # line, and whose cwd is 2,000 characters without a break; a tool call whose name and
    # input are markup. The session page was 17,929 px wide: the cwd in its facts (a
    # grid column sized to its content) did not wrap. Everything shows as text, wrapped.
    payloads, _ = _ordered_payloads()
    prompt = next(p for p in payloads if p["hook_event_name"] == "UserPromptSubmit")
    pre = next(p for p in payloads if p["hook_event_name"] == "PreToolUse")
    script = '</script><script>window.pwned=1</script><img id="xss" src="x" onerror="window.pwned=2">'
    text = script + " " + "x" * 300_000
    cwd = "/work/" + "d" * 2000
    hooks = [{**prompt, "prompt": text, "cwd": cwd},
             {**pre, "cwd": cwd, "tool_name": "<b>Bash</b>", "tool_input": {"command": script + "y" * 50_000}}]
    srv = Server(settings, env={"HOOKLEDGER_SUMMARIES_INTERVAL_S": "0"}).start()
    try:
        sid, _ = (post(srv.url, h, f"long-{n}")["sessions"][0] for n, h in enumerate(hooks))
        with _page(chromium, height=900) as page:
            page.goto(f"{srv.url}/#/session/{sid}")
            page.wait_for_selector(f'#batches tr[data-tool-use-id="{pre["tool_use_id"]}"]')
            shown = page.inner_text("#batches .prompt")
            tool = page.inner_text(f'#batches tr[data-tool-use-id="{pre["tool_use_id"]}"] td')
            widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            page.goto(f"{srv.url}/#/")
            page.wait_for_selector(f'tr.session-row[data-id="{sid}"]')
            list_widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            xss = page.locator("#xss, #view b, #view script").count()
            pwned = page.evaluate("window.pwned === undefined ? null : window.pwned")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    finally:
        srv.stop()
    assert shown == text and tool == "<b>Bash</b>"
    assert widths[0] <= widths[1], widths
    assert list_widths[0] <= list_widths[1], list_widths
    assert xss == 0 and pwned is None


def test_a_status_filter_in_any_case_takes_live_sessions(chromium: Any, settings: Settings) -> None:
    # The server matches ?status= in any case, so #/?status=processing lists those
    # sessions; the page's live filter must take the same spelling, or a session that
    # arrives while the page is open never shows there.
    def prompt(sid: str) -> dict[str, Any]:
        return {"session_id": sid, "cwd": "/tmp/live", "hook_event_name": "beforeSubmitPrompt",
                "prompt": "count me", "conversation_id": sid, "generation_id": "g1",
                "workspace_roots": ["/tmp/live"]}

    srv = Server(settings).start()
    try:
        r = httpx.post(srv.url + "/v1/hooks/cursor", json=prompt("case-live-1"), timeout=30)
        assert r.status_code == 202, r.text
        first = httpx.get(f"{srv.url}/v1/sessions?limit=10").json()["sessions"]
        assert len(first) == 1
        status = first[0]["status"]
        with _page(chromium) as page:
            page.goto(f"{srv.url}/#/?status={status.lower()}")
            page.wait_for_selector("#conn[data-state=live]")
            page.wait_for_selector(f"tr.session-row[data-id='{first[0]['id']}']")
            r = httpx.post(srv.url + "/v1/hooks/cursor", json=prompt("case-live-2"), timeout=30)
            assert r.status_code == 202, r.text
            second = [s for s in httpx.get(f"{srv.url}/v1/sessions?limit=10").json()["sessions"]
                      if s["external_id"] == "case-live-2"]
            assert second and second[0]["status"] == status
            page.wait_for_selector(f"tr.session-row[data-id='{second[0]['id']}']", timeout=10_000)
            shown = page.eval_on_selector_all("tr.session-row", "rs => rs.map(r => r.dataset.id)")
    finally:
        srv.stop()
    assert sorted(shown) == sorted([first[0]["id"], second[0]["id"]])
