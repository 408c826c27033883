"""Access: loopback by default; a token is required off loopback and, when set, on
ingest, read and stream endpoints (header, ``?token=`` or cookie)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from starlette.convertors import (
    FloatConvertor,
    IntegerConvertor,
    PathConvertor,
    StringConvertor,
    UUIDConvertor,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import build
from ledger.config import Settings

from conftest import Server, free_port, settings_env

HOOK_RUN = Path(__file__).resolve().parent.parent / "api" / "hot_path" / "run.py"
TOKEN = "s3cret-token-for-tests"
PROMPT = {
    "session_id": "9a0d6a2c-7f41-4c6e-9c47-000000000001",
    "transcript_path": "/tmp/t.jsonl",
    "cwd": "/work/access",
    "hook_event_name": "UserPromptSubmit",
    "prompt": "public part <private>the hidden key</private> end",
}


def non_loopback_ip() -> str | None:
    """An address of this machine other than loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for UDP connect
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


@pytest.mark.parametrize(("host", "loopback"), [
    ("localhost", True), ("LOCALHOST.", True), ("127.0.0.1", True), ("127.9.8.7", True),
    ("::1", True), ("[::1]", True), ("0:0:0:0:0:0:0:1", True), ("::ffff:127.0.0.1", True),
    ("127.example.com", False), ("localhost.example.com", False), ("10.0.0.1", False),
    ("0.0.0.0", False), ("::", False), ("::ffff:10.0.0.1", False), ("0127.0.0.1", False),
    ("", False),
])
def test_the_hook_and_the_server_agree_on_what_is_loopback(host: str, loopback: bool) -> None:
    """One definition: the server's bind check and the hook's choice between the local
    journal and HTTP (a host like ``127.example.com`` is a remote server)."""
    from api.access import bind_error
    from api.hot_path.hook_fast import is_loopback

    assert (bind_error(host, None) is None) is loopback
    if host:
        bracketed = f"[{host.strip('[]')}]" if ":" in host else host
        assert is_loopback(f"http://user@{bracketed}:8765/x") is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_non_loopback_bind_without_token_refuses_to_start(tmp_path: Path, host: str) -> None:
    env = settings_env(Settings(tmp_path / "data"))
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "serve", "--host", host, "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "HOOKLEDGER_TOKEN" in out.stderr and "refusing" in out.stderr


@pytest.mark.parametrize("token", [" ", "\t", " s3cret-token", "s3cret-token\n"])
def test_a_blank_or_padded_token_refuses_to_start(tmp_path: Path, token: str) -> None:
    env = {**settings_env(Settings(tmp_path / "data")), "HOOKLEDGER_TOKEN": token}
    out = subprocess.run(
        [sys.executable, "-m", "api.cli", "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "HOOKLEDGER_TOKEN is blank or starts or ends with whitespace" in out.stderr


def test_token_is_required_when_set(settings: Settings) -> None:
    srv = Server(settings, env={"HOOKLEDGER_TOKEN": TOKEN}).start()
    try:
        url = srv.url
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200
        assert httpx.get(url + "/", timeout=30).status_code != 401  # the viewer page is open
        for method, path in [
            ("GET", "/v1/sessions"),
            ("GET", "/v1/context?cwd=/x"),
            ("GET", "/v1/stream"),
            ("POST", "/v1/hooks/claude-code"),
        ]:
            r = httpx.request(method, url + path, json=PROMPT, timeout=30)
            assert r.status_code == 401, (path, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
            r = httpx.request(
                method,
                url + path,
                json=PROMPT,
                timeout=30,
                headers={"Authorization": "Bearer wrong"},
            )
            assert r.status_code == 401
        ok = {"Authorization": f"Bearer {TOKEN}"}
        assert (
            httpx.post(
                url + "/v1/hooks/claude-code", json=PROMPT, headers=ok, timeout=30
            ).status_code
            == 202
        )
        assert httpx.get(url + "/v1/sessions", headers=ok, timeout=30).status_code == 200
        assert httpx.get(url + f"/v1/sessions?token={TOKEN}", timeout=30).status_code == 200
        r = httpx.get(url + "/v1/sessions", cookies={"hookledger_token": TOKEN}, timeout=30)
        assert r.status_code == 200
        assert [s["external_id"] for s in r.json()["sessions"]] == [PROMPT["session_id"]]
    finally:
        srv.stop()


def test_remote_hook_sends_token_strips_private_and_spools_when_unreachable(
    settings: Settings,
) -> None:
    ip = non_loopback_ip()
    if ip is None:
        pytest.skip("this machine has no non-loopback address")
    srv = Server(settings, env={"HOOKLEDGER_TOKEN": TOKEN}, host="0.0.0.0")
    remote = f"http://{ip}:{srv.port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    env |= {"HOOKLEDGER_URL": remote, "HOOKLEDGER_TOKEN": TOKEN}
    hook = [
        os.path.realpath(sys.executable),
        "-S",
        str(HOOK_RUN),
        "claude-code",
        str(settings.data_dir),
    ]

    # Server down: the payload is journalled, without the private span.
    out = subprocess.run(
        hook, input=json.dumps(PROMPT).encode(), env=env, capture_output=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == b"{}"
    spool = settings.data_dir / "spool"  # the journal, or set aside by a forward attempt
    journal = b"".join(p.read_bytes() for p in spool.iterdir() if "journal" in p.name)
    assert b"public part" in journal and b"the hidden key" not in journal

    srv.start()
    try:
        second = {**PROMPT, "prompt": "second <PRIVATE>also hidden</private> prompt"}
        out = subprocess.run(
            hook, input=json.dumps(second).encode(), env=env, capture_output=True, timeout=60
        )
        assert out.returncode == 0 and out.stdout.strip() == b"{}"
        assert not [p for p in spool.iterdir() if "journal" in p.name], (
            "sent over HTTP, the spool trimmed"
        )
        ok = {"Authorization": f"Bearer {TOKEN}"}
        deadline = time.monotonic() + 10
        prompts: list[str] = []
        while time.monotonic() < deadline and len(prompts) < 2:
            r = httpx.get(f"{remote}/v1/sessions/{PROMPT['session_id']}", headers=ok, timeout=30)
            prompts = (
                [b["prompt"] for b in r.json().get("batches", [])] if r.status_code == 200 else []
            )
            time.sleep(0.05)
        assert prompts == ["public part [private] end", "second [private] prompt"]
        # the removals made at the edge are recorded with the prompts, by either route
        r = httpx.get(f"{remote}/v1/sessions/{PROMPT['session_id']}/events", headers=ok, timeout=30)
        recorded = [
            (e["raw"]["prompt"], e["redactions"])
            for e in r.json()["events"]
            if e["kind"] == "PromptSubmitted"
        ]
        edge = [{"kind": "private_tag", "path": "$.prompt", "count": 1}]
        assert recorded == [
            ("public part [private] end", edge),  # journalled while the server was down
            ("second [private] prompt", edge),  # POSTed
        ]
    finally:
        srv.stop()


# -- every route of the app, enumerated: a route added later is covered automatically ---

PUBLIC_ROUTES = frozenset({"/", "/healthz", "/static/{path}"})
"""Routes that answer without the token, by path template: the viewer's page and its
static assets (the shell holds no data; it asks for the token) and the health check
(``api/access.py``: ``OPEN_PATHS``, ``OPEN_PREFIXES``). Everything else needs it."""

_DUMMY_PARAMS = {
    IntegerConvertor: 1,
    FloatConvertor: 1.5,
    UUIDConvertor: uuid.UUID("9a0d6a2c-7f41-4c6e-9c47-0000000000ff"),
    PathConvertor: "dummy/file.txt",
    StringConvertor: "dummy",
}


def _probes(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, str, str]]:
    """(method, template, concrete path) for every endpoint under ``routes``, Mount
    sub-routes included; a route type this does not know fails the test (teach it)."""
    out: list[tuple[str, str, str]] = []
    for route in routes:
        if isinstance(route, Route):
            template = prefix + route.path_format
            methods = sorted(route.methods or {"GET"})
        elif isinstance(route, Mount) and route.routes:
            out += _probes(list(route.routes), prefix + route.path)
            continue
        elif isinstance(route, Mount):  # an ASGI app (e.g. StaticFiles): any path below it
            template = prefix + route.path_format
            methods = ["GET", "HEAD"]
        else:
            raise AssertionError(f"no probe for {type(route).__name__} {route!r}: extend _probes")
        values = {
            name: conv.to_string(_DUMMY_PARAMS[type(conv)])
            for name, conv in route.param_convertors.items()
        }
        path = template
        for name, value in values.items():
            path = path.replace("{" + name + "}", value)
        assert "{" not in path, (template, path)
        out += [(m, template, path) for m in methods]
    return out


def test_every_route_needs_the_token_except_the_public_ones(tmp_path: Path) -> None:
    services = build(Settings(tmp_path / "data"))
    app = create_app(services, token=TOKEN)
    probes = _probes(list(app.routes))
    templates = {t for _, t, _ in probes}
    # the enumeration is not vacuous, and no exemption names a route that is gone
    assert {"/v1/hooks/{agent}", "/v1/stream", "/v1/sessions/{id}"} <= templates, templates
    assert templates >= PUBLIC_ROUTES, PUBLIC_ROUTES - templates
    unprotected, refused = [], []
    try:
        with TestClient(app) as client:
            for method, template, path in probes:
                for token in (None, "wrong", TOKEN):
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    # stream(): the SSE endpoint never ends; only the status is read
                    with client.stream(method, path, headers=headers, content=b"{}") as r:
                        status = r.status_code
                    if template in PUBLIC_ROUTES or token == TOKEN:
                        if status == 401:
                            refused.append((method, path, token, status))
                    elif status != 401 or r.headers.get("www-authenticate") != "Bearer":
                        unprotected.append((method, path, token, status))
    finally:
        services.close()
    assert not unprotected, f"answered without a valid token: {unprotected}"
    assert not refused, f"refused although public or with the token: {refused}"


def test_the_token_as_a_query_parameter_works_wherever_the_header_does(tmp_path: Path) -> None:
    # `?token=` is the documented form for clients that cannot set headers; a route that
    # checks its query parameters must not take it for one of its own (the analytics
    # queries answered 400 "unknown parameters: token")
    from projections.analytics import named_queries

    services = build(Settings(tmp_path / "data"))
    app = create_app(services, token=TOKEN)
    paths = [p for m, t, p in _probes(list(app.routes)) if m == "GET" and t not in PUBLIC_ROUTES]
    paths += [f"/v1/analytics/{name}" for name in named_queries()]
    paths += ["/v1/analytics/tool-usage?limit=5", "/v1/context?cwd=/x"]
    differ = []
    try:
        with TestClient(app) as client:
            for path in paths:
                with client.stream("GET", path, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                    by_header = r.status_code
                sep = "&" if "?" in path else "?"
                with client.stream("GET", f"{path}{sep}token={TOKEN}") as r:
                    by_query = r.status_code, r.read() if r.status_code != 200 else b""
                if by_query[0] != by_header:
                    differ.append((path, by_header, by_query))
    finally:
        services.close()
    assert not differ, differ
