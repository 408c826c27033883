"""``serve`` imports the transcripts local hooks name (``api.transcript_follower``): a
session captured by hooks gets the token usage only its transcript holds, without an
``import``; a remote hook's path is not followed."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from api.transcript_follower import transcript_paths
from ledger.config import Settings
from ledger.observation import Observation, Rejected, SessionRef

from conftest import FIXTURES, Server, cli

TRANSCRIPT = FIXTURES / "spotter-claude-transcripts" / "tool_heavy.jsonl"
HOOK_RUN = Path(__file__).resolve().parent.parent / "api" / "hot_path" / "run.py"
TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _session_id() -> str:
    for line in TRANSCRIPT.read_text().splitlines():
        sid = json.loads(line).get("sessionId")
        if sid:
            return str(sid)
    raise AssertionError("no sessionId")


def _hook(data_dir: Path, payload: dict[str, object]) -> None:
    """The command install-hooks writes, as the agent runs it: into the spool journal."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKLEDGER_")}
    done = subprocess.run(
        [os.path.realpath(sys.executable), "-S", str(HOOK_RUN), "claude-code", str(data_dir)],
        input=json.dumps(payload).encode(), capture_output=True, timeout=60, env=base,
    )
    assert done.returncode == 0, done.stderr


def _tokens(server: Server, external_id: str) -> dict[str, object] | None:
    listed = httpx.get(f"{server.url}/v1/sessions?limit=100").json()["sessions"]
    found = [s for s in listed if s["external_id"] == external_id]
    return {k: found[0][k] for k in TOKENS} if found else None


def _await_tokens(server: Server, external_id: str, want: dict[str, object]) -> None:
    deadline = time.monotonic() + 60
    got = None
    while time.monotonic() < deadline:
        got = _tokens(server, external_id)
        if got == want:
            return
        time.sleep(0.2)
    raise AssertionError(f"tokens {got}, want {want}")


def _reference(settings: Settings, path: Path) -> dict[str, object]:
    cli(settings, "import", str(path))
    session = json.loads(cli(settings, "sessions", "--json").stdout)
    (only,) = session
    return {k: only[k] for k in TOKENS}


def test_a_transcript_named_by_local_hooks_is_imported_and_followed_as_it_grows(
    settings: Settings, tmp_path: Path
) -> None:
    settings = dataclasses.replace(settings, transcript_quiet_s=0.3)
    sid = _session_id()
    lines = TRANSCRIPT.read_bytes().splitlines(keepends=True)
    path = tmp_path / "projects" / "-home-marco-projects-spotter" / f"{sid}.jsonl"
    path.parent.mkdir(parents=True)
    half = tmp_path / "half.jsonl"
    half.write_bytes(b"".join(lines[: len(lines) // 2]))
    path.write_bytes(half.read_bytes())
    hook = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/marco/projects/spotter"}

    server = Server(settings).start()
    try:
        _hook(settings.data_dir, {**hook, "hook_event_name": "UserPromptSubmit", "prompt": "go"})
        _hook(settings.data_dir, {**hook, "hook_event_name": "Stop", "stop_hook_active": False})
        first = _reference(Settings(tmp_path / "ref-half", transcript_quiet_s=0), half)
        assert any(first[k] for k in TOKENS)
        _await_tokens(server, sid, first)

        path.write_bytes(TRANSCRIPT.read_bytes())  # the next turn, then its Stop hook
        _hook(settings.data_dir, {**hook, "hook_event_name": "Stop", "stop_hook_active": False})
        whole = tmp_path / "whole" / path.name
        whole.parent.mkdir()
        whole.write_bytes(TRANSCRIPT.read_bytes())
        want = _reference(Settings(tmp_path / "ref-whole", transcript_quiet_s=0), whole)
        assert want != first
        _await_tokens(server, sid, want)
        # the grown transcript was read from where the first read ended
        followed = httpx.get(f"{server.url}/healthz").json()["transcripts"]
        assert followed["whole_reads"] == 0 and followed["tail_reads"] >= 2, followed
        assert followed["error"] is None
    finally:
        server.stop()


def test_a_remote_hooks_transcript_path_is_not_followed(settings: Settings, tmp_path: Path) -> None:
    settings = dataclasses.replace(settings, transcript_quiet_s=0.3)
    sid = _session_id()
    path = tmp_path / f"{sid}.jsonl"
    path.write_bytes(TRANSCRIPT.read_bytes())  # a file here by the name a remote hook sent
    hook = {"session_id": sid, "transcript_path": str(path), "cwd": "/home/marco/projects/spotter"}
    local = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"
    local_sid = next(
        json.loads(line)["sessionId"] for line in local.read_text().splitlines()
        if json.loads(line).get("sessionId")
    )
    server = Server(settings).start()
    try:
        for name in ("UserPromptSubmit", "Stop"):
            answer = httpx.post(
                f"{server.url}/v1/hooks/claude-code", json={**hook, "hook_event_name": name, "prompt": "go"}
            )
            assert answer.status_code == 202
        # then a local hook's transcript: once it is followed, the remote one would have been
        _hook(settings.data_dir, {"session_id": local_sid, "transcript_path": str(local),
                                  "hook_event_name": "Stop", "stop_hook_active": False})
        _await_tokens(server, local_sid, _reference(Settings(tmp_path / "ref", transcript_quiet_s=0), local))
        assert _tokens(server, sid) == dict.fromkeys(TOKENS, 0)
    finally:
        server.stop()


def test_only_absolute_transcript_files_are_named() -> None:
    ref = SessionRef("claude-code", "s")

    def hook(raw: object) -> Observation:
        return Observation(ref, "Stopped", "k", {}, "claude-code.hook", raw=raw)

    items = [
        hook({"transcript_path": "/home/me/.claude/projects/p/s.jsonl"}),
        hook({"agent_transcript_path": "/home/me/.claude/projects/p/s/subagents/agent-a.jsonl"}),
        hook({"transcript_path": "relative/s.jsonl"}),
        hook({"transcript_path": "/etc/passwd"}),
        hook({"transcript_path": None}),
        hook(None),
        Rejected("src", "line 1", "bad", b"{}", "claude-code", "claude-code.hook"),
    ]
    assert transcript_paths(items) == {
        "/home/me/.claude/projects/p/s.jsonl",
        "/home/me/.claude/projects/p/s/subagents/agent-a.jsonl",
    }
