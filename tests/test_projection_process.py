"""``hookledger serve`` projects in a child process (``--projections process``, the
default): reads still see every write, the child is started again when it dies, and it
never outlives its server. Real server, real processes."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from api.projection_process import NICE
from ledger.config import Settings

from conftest import Server


def _prompt(n: int) -> bytes:
    return json.dumps({
        "session_id": "00000000-0000-4000-8000-00000000beef",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work/projection-process",
        "hook_event_name": "UserPromptSubmit",
        "prompt": f"prompt {n}",
    }).encode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purposes
        return f.read().split(") ")[1][0] != "Z"


def _health(url: str) -> dict:
    return httpx.get(url + "/healthz", timeout=30).json()


def test_projections_run_in_a_child_that_is_restarted_and_dies_with_the_server(
    settings: Settings,
) -> None:
    srv = Server(settings).start()
    try:
        health = _health(srv.url)
        child = health["projection_process"]["pid"]
        assert health["projection_process"]["alive"] and child != srv.proc.pid
        for n in range(3):
            r = httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(n), timeout=30)
            assert r.status_code == 202
        sid = r.json()["sessions"][0]
        batches = httpx.get(f"{srv.url}/v1/sessions/{sid}", timeout=30).json()["batches"]
        assert [b["prompt"] for b in batches] == ["prompt 0", "prompt 1", "prompt 2"]
        # the child projected those (it is alive), so it has lowered its priority
        server_nice = os.getpriority(os.PRIO_PROCESS, srv.proc.pid)
        assert os.getpriority(os.PRIO_PROCESS, child) == min(server_nice + NICE, 19)

        os.kill(child, signal.SIGKILL)
        for n in range(3, 6):  # while it is down: the server catches up itself
            httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(n), timeout=30)
        batches = httpx.get(f"{srv.url}/v1/sessions/{sid}", timeout=30).json()["batches"]
        assert [b["prompt"] for b in batches] == [f"prompt {n}" for n in range(6)]

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            health = _health(srv.url)
            state = health["projection_process"]
            if state["restarts"] == 1 and state["alive"]:
                break
            time.sleep(0.1)
        assert health["projection_process"]["restarts"] == 1, health
        assert health["ok"], health
        child = health["projection_process"]["pid"]
        httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(6), timeout=30)
        batches = httpx.get(f"{srv.url}/v1/sessions/{sid}", timeout=30).json()["batches"]
        assert len(batches) == 7
        events = httpx.get(f"{srv.url}/v1/sessions/{sid}/events", timeout=30).json()["events"]
        # exactly once: every prompt event is indexed at one position
        positions = [e["position"] for e in events]
        assert None not in positions and len(set(positions)) == len(positions)
    finally:
        srv.stop(kill=True)  # SIGKILL: no shutdown hook runs in the server
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the child exits when its server dies"


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_both_modes_give_the_same_sessions(settings: Settings, mode: str) -> None:
    import subprocess
    import sys

    from conftest import settings_env

    srv = Server(settings)
    srv.proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--port", str(srv.port), "--projections", mode],
        env=settings_env(settings), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(srv.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert ("projection_process" in _health(srv.url)) == (mode == "process")
        for n in range(4):
            httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(n), timeout=30)
        sessions = httpx.get(srv.url + "/v1/sessions", timeout=30).json()["sessions"]
        assert [s["prompt_count"] for s in sessions] == [4]
    finally:
        srv.stop()


def test_ctrl_c_stops_the_server_and_its_child_quietly(settings: Settings) -> None:
    # Ctrl-C in a terminal signals the whole foreground process group: the child must
    # not die of it (a KeyboardInterrupt traceback, then "starting it again" from the
    # server while it shuts down); the server stops it.
    import subprocess
    import sys

    from conftest import free_port, settings_env

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--port", str(port)],
        env=settings_env(settings), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()
                if health.get("projection_process", {}).get("alive"):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"starting it again" not in err, err.decode()


def test_a_child_that_keeps_dying_is_started_again_with_a_growing_delay(services) -> None:  # type: ignore[no-untyped-def]
    # The first death restarts it at once; a second one soon after its start waits
    # RESTART_DELAY_S, the next twice that (before: a child that could not start was
    # started again every 0.1 s, forever).
    from api.projection_process import RESTART_DELAY_S, ProjectionProcess

    pp = ProjectionProcess(services)
    pp.start()
    try:
        waits = []
        for expected_restarts in (1, 2, 3):
            os.kill(pp.health()["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while pp.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            started = time.monotonic()
            while pp.restarts < expected_restarts:
                pp.ensure_running()
                time.sleep(0.01)
            waits.append(time.monotonic() - started)
            assert pp.alive()
        assert waits[0] < RESTART_DELAY_S, waits
        assert RESTART_DELAY_S <= waits[1] < 2 * RESTART_DELAY_S + 1, waits
        assert waits[2] >= 2 * RESTART_DELAY_S, waits
    finally:
        pp.stop()


def test_a_child_stopped_while_it_is_still_starting_is_ended_at_once(services) -> None:  # type: ignore[no-untyped-def]
    # A server stopped right after its start (Ctrl-C, a test's fixture) waited for its
    # child to finish importing and opening the store, at its lower priority: seconds
    # on a busy machine, then STOP_TIMEOUT_S and SIGKILL when the open was stuck. A
    # child that has not started projecting has nothing to finish: it is ended at once.
    from api.projection_process import ProjectionProcess
    from projections.store import schema_lock

    pp = ProjectionProcess(services)
    with schema_lock(services.models.engine):  # the child's open of the store waits here
        pp.start()
        assert pp.alive()
        pp.stop()
        assert not pp.alive()
    assert pp._proc is not None and pp._proc.exitcode == -signal.SIGTERM  # not SIGKILL


def test_healthz_says_when_the_projection_process_cannot_catch_up(settings: Settings) -> None:
    # the child's failures were only logged: /healthz answered ok while every read
    # model stood still (e.g. at an event a projection cannot apply)
    from sqlalchemy import text

    from api.bootstrap import build

    srv = Server(settings).start()
    services = build(settings)
    try:
        assert httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(0), timeout=30).is_success
        # the child has started (it creates missing tables when it opens the store)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _health(srv.url)["projections"]["batches"]["lag"]:
            time.sleep(0.1)
        assert _health(srv.url)["ok"]
        batches = services.models.table("prompt_batches").name
        with services.models.engine.begin() as conn:  # the batches projection loses its table
            conn.execute(text(f'ALTER TABLE "{batches}" RENAME TO hidden_batches'))
        httpx.post(srv.url + "/v1/hooks/claude-code", content=_prompt(1), timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _health(srv.url)["ok"]:
            time.sleep(0.1)
        r = httpx.get(srv.url + "/healthz", timeout=30)
        assert r.status_code == 503, r.text
        health = r.json()
        assert "prompt_batches" in health["error"], health
        assert health["error"].startswith("projections cannot catch up: ")
        assert health["projection_process"]["error"] in health["error"]
        with services.models.engine.begin() as conn:  # the table is back: it catches up
            conn.execute(text(f'ALTER TABLE hidden_batches RENAME TO "{batches}"'))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _health(srv.url)["ok"]:
            time.sleep(0.1)
        health = _health(srv.url)
        assert health["ok"] and health["projection_process"]["error"] is None, health
        assert all(p["lag"] == 0 for p in health["projections"].values())
    finally:
        services.close()
        srv.stop()
