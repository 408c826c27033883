"""Inputs that open no prompt batch — slash commands (``/clear``) and background-task
notifications — are kept in the read model, in their batch and in log order, and shown
by ``show`` (they are not prompts, so batches and prompt counts leave them out)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ledger.config import Settings

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
