"""Inputs that open no prompt batch — slash commands (``/clear``) and background-task
notifications — are kept in the read model, in their batch and in log order, and shown
by ``show`` (they are not prompts, so batches and prompt counts leave them out)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from api.bootstrap import Services
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from ledger.observation import session_id
from projections import queries

from conftest import FIXTURES, cli

TWO = FIXTURES / "agentcmd-claude-transcripts" / "full-session-two.jsonl"
DRIFT = FIXTURES / "agent-sessions-schema-drift" / "claude_schema_drift.jsonl"
LOCAL = FIXTURES / "spotter-claude-transcripts" / "short.jsonl"  # a local /model


def _texts(record: dict[str, Any]) -> list[str]:
    content = record.get("message", {}).get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    return []


def _expected(path: Path) -> list[tuple[str, str]]:
    """(kind, text) of the file's user records that are a slash command or a task
    notification, read with plain json and regular expressions."""
    found = []
    for line in path.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("type") == "system" and record.get("subtype") == "local_command":
            text = record.get("content", "")  # Claude Code 2.1.x: /model, /mcp
        elif record.get("type") != "user" or record.get("isMeta"):
            continue
        else:
            text = "\n".join(_texts(record))
        name = re.search(r"<command-name>\s*(/?[^<\s]+)\s*</command-name>", text)
        if name:
            args = re.search(r"<command-args>([^<]*)</command-args>", text)
            command = "/" + name.group(1).lstrip("/")
            found.append(("command", command + (" " + args.group(1).strip() if args and args.group(1).strip() else "")))
        elif text.lstrip().startswith("<task-notification>") or (
            record.get("origin", {}).get("kind") == "task-notification"  # Claude Code 2.1.88+
        ):
            found.append(("task_notification", text))
    return found


def _session(settings: Settings, external_id: str) -> dict[str, Any]:
    return json.loads(cli(settings, "show", "--json", external_id).stdout)


def _session_ids(path: Path) -> list[str]:
    ids = []
    for line in path.read_text().splitlines():
        sid = json.loads(line).get("sessionId") if line.strip() else None
        if sid and sid not in ids:
            ids.append(sid)
    return ids


def test_slash_commands_and_task_notifications_are_kept_in_their_batch(settings: Settings) -> None:
    cli(settings, "import", str(TWO), str(DRIFT), str(LOCAL))
    for path in (TWO, DRIFT, LOCAL):
        expected = _expected(path)
        assert expected, path  # the fixture holds some
        (sid,) = _session_ids(path)
        found = _session(settings, sid)
        inputs = found["inputs"]
        assert [(i["kind"], i["text"]) for i in inputs] == expected
        assert [i["position"] for i in inputs] == sorted(i["position"] for i in inputs)
        opened = {b["batch"] for b in found["batches"]}
        assert all(i["batch"] == 0 or i["batch"] in opened for i in inputs)
        assert all(b["prompt_kind"] in ("human", "task", "recovery") for b in found["batches"])
        text = cli(settings, "show", sid).stdout.decode()
        for kind, shown in expected:
            assert f"> {kind}: {shown[:100]!r}" in text


def test_a_rebuild_gives_the_same_inputs(settings: Settings) -> None:
    cli(settings, "import", str(TWO))
    (sid,) = _session_ids(TWO)
    before = _session(settings, sid)["inputs"]
    cli(settings, "projections", "rebuild", "batches")
    assert _session(settings, sid)["inputs"] == before != []


COORP = FIXTURES / "coorp-serverless-plugins-hook-logs"
COORP_SID = "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
BEADS = FIXTURES / "spotter-claude-transcripts" / "subagent.jsonl"  # /handgemacht:create-beads


def _coorp_transcript(tmp_path: Path) -> Path:
    """The real coorp transcript (a JSON array as its logger saved it) as the JSONL
    file Claude Code wrote."""
    records = json.loads((COORP / COORP_SID / "chat.json").read_text())
    path = tmp_path / f"{COORP_SID}.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "transcript-first"])
def test_a_slash_command_the_model_answers_is_a_human_prompt_in_hooks_and_transcript(
    services: Services, tmp_path: Path, hooks_first: bool
) -> None:
    # The real coorp session starts with `/prime & read … lets think this through`: a
    # prompt command (its prompt goes to the model, which answers in a turn), in the
    # UserPromptSubmit hooks as typed and in the transcript as <command-message> /
    # <command-name> / <command-args>. Later the user runs the local `/effort ultracode`
    # (no hook, no model turn). Before, `/prime …` was a `command` in both sources: it
    # opened no batch, and its turn's 142 facts fell before the first batch.
    transcript = _coorp_transcript(tmp_path)
    hooks = [p for p in json.loads((COORP / "user_prompt_submit.json").read_text())
             if p["session_id"] == COORP_SID]
    assert hooks[0]["prompt"].startswith("/prime & read ")

    def send_hooks() -> None:
        for i, h in enumerate(hooks):
            body = json.dumps(h).encode()
            assert ingest_hook(services.ledger, "claude-code", body, f"ups-{i}").error is None

    if hooks_first:
        send_hooks()
    import_paths(services.ledger, [transcript])
    if not hooks_first:
        send_hooks()
    services.runner.catch_up()
    detail = queries.get_session(services.models, str(session_id("claude-code", COORP_SID)))
    assert detail is not None
    batches = detail["batches"]
    assert batches[0]["prompt"] == hooks[0]["prompt"].strip()
    assert batches[0]["prompt_kind"] == "human"
    assert detail["prompt_count"] == len(batches) == len(hooks) - 3  # 3 task notifications
    assert [(i["kind"], i["text"]) for i in detail["inputs"] if i["kind"] == "command"] == [
        ("command", "/effort ultracode")
    ]
    # the /prime turn's tool calls are in its batch: none before the first prompt
    assert detail["tool_calls"] and all(c["batch"] >= 1 for c in detail["tool_calls"])


def test_a_plugin_command_with_arguments_opens_the_sessions_first_batch(
    settings: Settings,
) -> None:
    # spotter's real 2.1.38 session opens with `/handgemacht:create-beads websearch to
    # learn …` (a plugin's prompt command): it is the session's first prompt.
    cli(settings, "import", str(BEADS))
    (sid,) = _session_ids(BEADS)
    found = _session(settings, sid)
    first = found["batches"][0]
    assert first["batch"] == 1 and first["prompt_kind"] == "human"
    assert first["prompt"].startswith("/handgemacht:create-beads websearch to learn")
    assert all(i["kind"] != "command" for i in found["inputs"])
