"""The event store rows the write path produces, pinned byte for byte.

Every bundled fixture is imported and every bundled hook payload ingested with the
recording clock fixed, and the rows of the log (position, stream id, version, topic,
state bytes) are hashed. The expected hash was taken from the write path before its
per-event shortcuts (commit 126d082): if a change to the write path alters any stored
byte (a field, its order, a timestamp's form, a digest), this test fails.

A deliberate change of the stored form (or of the fixtures, or of a parser's facts)
changes the hash too; then re-derive it with ``rows_digest`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import pytest

from api.bootstrap import Services
from ledger import app as ledger_app
from ledger.importer import import_paths
from ledger.ingest import ingest_hook

from conftest import FIXTURES

RECORDED_AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
HOOK_FILES = sorted(
    p
    for folder in ("coorp-serverless-plugins-hook-logs", "attio-mcp-server-hook-logs")
    for p in (FIXTURES / folder).rglob("*.json")
    if p.name != "chat.json"
)
EXPECTED_EVENTS = 7381
EXPECTED_SHA256 = "f8827ad64207aa7aaee5af8fba383f6617b2410bfa4fd10584a688e387e4c663"
# Re-derived on 2026-11-28 (review-cost, 1-hour cache writes): Session.UsageRecorded
# gains cache_creation_1h_input_tokens (class_version 2), the part of
# cache_creation_input_tokens Claude Code reports as cache_creation.ephemeral_1h_input_tokens,
# priced at the 1-hour rate. The same 7,381 rows at the same positions, keys and topics;
# compared row by row against dbeeff6: all 668 UsageRecorded rows gain the field (342 of
# them non-zero) and "class_version":2, otherwise equal; 4,530 later rows of the same 41
# streams differ in their digest only; raw records unchanged.
# Re-derived on 2026-11-28 (review-lifecycle, slash commands): a Claude Code prompt
# command (its prompt goes to the model: written with <command-message> first in a
# transcript; any /name in a UserPromptSubmit hook) is a human prompt that opens a batch,
# not a `command`. The same 7,381 rows at the same positions, statuses unchanged;
# compared row by row against 986f701, four streams change: 3094b661 (coorp 4f65f198:
# its `/prime …` hook and transcript record gain prompt_kind human and batch 1, 984
# later rows batch +1, 5 more rows differ in their digest only), 1b43a773 (spotter
# 491e126e, `/handgemacht:create-beads …`: 1 prompt + 123 rows batch 0 -> 1), a36d1890
# (coorp hook 2119c290 `/prime …`: 1 row) and 1557f13b (agentcmd
# user-slash-command-with-args: 1 row).
# Re-derived on 2026-11-28 (review-lifecycle): a hook captured in the same millisecond as
# the session's end is after the end (the log orders live captures): the coorp
# session_start.json payload 1 (a resume at the SessionEnd's instant) now reopens its
# session, one Session.Reopened more, 7380 -> 7381 events.
# Re-derived on 2026-11-28 (CwdLearned): a session opened by a fact that names no cwd
# learns it from its first fact that does (Claude Code 2.x starts a transcript with
# permission-mode / last-prompt / mode records without one): three sessions of the
# fixtures (ses_stage0_small, ses_stage0_drift, a4c79bab's stream) gain a
# Session.CwdLearned each, 7377 -> 7380 events; nothing else changes.
# Re-derived on 2026-11-27 (review-user), later: a transcript's (or rollout's) facts that
# no prompt of their file precedes (``BEFORE_FIRST_PROMPT``), recorded after the hooks'
# prompts, go to batch 0 and are history (no status change). Two streams change, both a
# hook-captured session whose transcript this test imports after its hooks: 3094b661
# (coorp 4f65f198: the `/prime` command's turn, before the first human prompt, 142 rows
# batch 3 -> 0; with its TurnEnded now history, 847 later rows keep the hooks' status
# PROCESSING instead of WAITING; 983 rows differ) and 511c0b4b (attio 8664c04e: one
# `system` record batch 3 -> 0; its 212 rows from there on differ in their digest).
# Re-derived on 2026-11-27 (review-user): a Codex rollout's facts name the prompt they
# follow (``after_prompt``), as a Claude Code transcript's do, so a rollout imported
# after the hooks puts each turn's usage in its prompt's batch. A fact of a turn after
# that turn ended (``turn_aborted`` / ``task_complete``, no new prompt yet) is then
# history and leaves the status WAITING, as in a transcript. The same 7,377 rows at the
# same positions; two streams change, compared row by row against 1ad1dbd: 20 rows of
# the rollouts 01997e76-… (9) and 019fc8be-… (the 0.146 drift rollout, 11) have
# ``status`` WAITING instead of PROCESSING, and the rows of those two streams from the
# first of them on differ in their digest only (752 rows in all).
# Re-derived on 2026-11-25 after merging fix-subagent into main (which had fix-cursor):
# both changes below, in disjoint streams (the drift subagent's 5 rows; fix-cursor's 19
# streams); the hash of the two together.
# Re-derived on 2026-11-25 (fix-subagent): a subagent transcript whose records give
# ``sessionId: "agent-<agentId>"`` (the schema-drift fixture claude_subagent/<parent>/
# subagents/agent-a0ad4f44468bdf20d.jsonl) is the child of the session whose folder holds
# it, 0a1b2c3d-…, not of a session named after the run (which does not exist). The same
# 7,377 rows at the same positions; 5 differ, positions 1874-1878, that subagent's whole
# stream: its id is now uuid5 of "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f/agent-a0ad4f4446
# 8bdf20d" (dfad47c1…, was c2ba9ef5… of "agent-a0ad4f44468bdf20d/agent-a0ad4f44468bdf20d"),
# so every row's originator_id and digest change; its Opened also names that
# external_id and parent_id 0483b49d… (the parent's stream; was b2b9be9b…, no stream).
# The raw records are byte for byte the same; every other stream is unchanged.
# Re-derived on 2026-11-25 (fix-cursor): a tool call's start that arrives after its
# completion is kept as a Session.LateStartObserved (a RecordObserved subclass, same
# record_type "tool call start after its completion", same key, aliases and raw) that
# also names the call as recorded (tool_use_id) and the start's tool_name and
# tool_input, so the tool_calls read model can take the start's time and input. The
# same 7,377 rows at the same positions, compared row by row against 3293513: 365
# change topic and gain those three fields: 221 in the attio 2025 sessions 6706089d
# (123) and 4111cd2e (98), whose id-less PreToolUse this test ingests after their
# PostToolUse (Session._late_pair); 143 in the coorp session 4f65f198 and 15 of its
# subagents (PreToolUse with a tool_use_id after its PostToolUse); 1 in the Codex
# 0.146 drift rollout 019fc8be (a function_call_output before its call). 1,129 more
# rows of those 19 streams differ only in their digest (the chain after a changed row).
# Re-derived on 2026-11-25, at the very end: Claude Code 2.1.x writes a local slash
# command (/model, /mcp) as a ``system`` record of subtype ``local_command``; one whose
# content names a command is now a PromptSubmitted of kind ``command`` (text ``/name
# args``), as the same command written as a user record always was, instead of a
# RecordObserved. The same 7,377 rows at the same positions: 2 change kind (one in each
# of two spotter sessions), 24 more after them differ only in their digest.
# Re-derived on 2026-11-25, last (after the merge-pairing merge): a Claude Code (and
# OpenClaw) transcript's facts name the prompt they follow by its ``prompt:`` alias, the
# key the hooks' copy of that prompt shares, so a transcript imported after the hooks
# (as here) puts them in that prompt's batch. Before, the hooks' prompt was not found by
# the transcript's own record key and every fact fell into the latest batch. The same
# 7,377 rows at the same positions; compared row by row, 1,022 differ in content, all in
# two attio sessions: 3094b661 (841 rows: batch 3 -> 1; 795 of them keep WAITING instead
# of moving the session to PROCESSING, being history of an ended turn) and 511c0b4b (181
# rows: batch 3 -> 1 or 2; 3 rows PROCESSING where they were WAITING), plus 30 rows of
# 511c0b4b that differ only in their digest.
# Re-derived on 2026-11-25, later (merge-pairing): a completion of a call another source
# recorded is stored in its start's batch (Session._call_batch), not the batch current
# when it arrived. The same 7,377 rows; 30 differ in content (``batch`` only), 176 more
# in their digest only, all in the attio session 8664c04e: its transcript's tool results
# complete the calls its 2025 hooks recorded (ingested here before any of its prompts,
# so in batch 0), and were stored in batch 3, the batch current at the import. Every
# other stream is byte for byte the same.
# Re-derived on 2026-11-25 (merge-pairing: fix-pairing brought into fix-aliases): the
# same 7,377 rows; 221 differ in content, 14 more in their digest only, all in the two
# attio sessions 4111cd2e and 6706089d, whose 2025 PreToolUse payloads (no tool_use_id)
# this test ingests after their PostToolUse (name order). Each such Pre was appended as
# a second ToolCallStarted next to the start its Post had derived; it is now the late
# start of that call (Session._late_pair): a RecordObserved "tool call start after its
# completion", key its own capture key, alias ``<derived start key>:late``. 221 tool
# calls fewer, no row more or less. These two streams are byte for byte fix-pairing's
# (f967254); every other stream is byte for byte fix-aliases' (08bd4e2): the Gemini chat
# file's ``call:`` aliases stay handed over, not stored (fix-pairing stored them: 40 rows).
# Re-derived on 2026-11-25 (fix-aliases): 30 rows fewer, all in one stream, the attio
# session 8664c04e, whose 2025 hooks (no tool_use_id) are ingested here before its
# transcript is imported. Nothing met the hooks' id-less calls with the transcript's:
# 67 ToolCallStarted for 37 calls. Now the transcript's copy of a hook call (the same
# tool and input, n-th on each side: call:{hash}:{n}) appends nothing and its tool
# result completes the hook's call: 37 starts, and the 30 completions the transcript
# adds name the hooks' hook-… ids. Every other stream's rows are byte for byte the same
# (compared row by row against 7cd680b): the file-side alias is handed over, not stored.
# Re-derived after merging fix-openclaw-cursor and fix-summaries: both changes below.
# Re-derived on 2026-11-25, last: the same 7,407 rows; 32 differ. (1) Cursor transcript
# tool calls without an id carry the alias ``call:{hash of name and input}:{n}`` (their
# completions ``…:end``), which the aggregate gives the hooks' copy of the call: 3 rows.
# (2) A transcript record that follows a prompt of the current batch after that batch's
# turn ended in the stream (the hooks' Stop, ingested first here) no longer moves the
# status: 20 Claude Code transcript rows of two sessions (a task notification after the
# Stop, and what followed it) keep WAITING instead of PROCESSING; the other 9 rows
# differ only in their digest (the chain after a changed row).
# Re-derived on 2026-11-25 (fix-summaries): the same 7,407 rows; a Codex rollout's
# function_call_output that is text for a call Codex did not run ("failed in sandbox …
# exit code: 2", "patch rejected by user") is now a failed ToolCallCompleted (is_error,
# error = its first line): 4 rows of the agentcmd rollout 01997e76, and the rows after
# them in its stream differ only in their digest.
# Re-derived on 2026-11-25, later still: a tool call's completion whose start the
# stream never saw now appends a ToolCallStarted derived from it first (record_key
# ``derived:…``; Session._start_unseen_call), and a start arriving after that is kept as
# a RecordObserved ``<start key>:late`` (Session._keep_late_start). This test ingests
# the hook files in name order, so every PostToolUse comes before its PreToolUse: 368
# derived starts (367 from hooks, one from a Codex rollout whose output has no call),
# and the 144 hook starts that arrive after theirs kept as late records instead of
# being appended as starts: 368 more rows than 7,039.
# Re-derived on 2026-11-25, later: import names a file by its absolute path (discover(),
# so a re-import under another spelling of the path adds no rejected line twice), and
# this test imports through one fixed absolute path. The code before that change,
# importing through the same path, gives this same hash: nothing else moved.
# Re-derived on 2026-11-25: an import now records runs of ~2 MiB of files per
# Ledger.record call (was up to 20,000 facts), so sessions and rejected lines interleave
# differently in the log. The same 7,039 rows (stream, version, topic, state bytes) as
# at c120821…'s derivation, compared as a sorted set: only their positions moved.


class _FixedClock(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
        return RECORDED_AT


def rows_digest(services: Services) -> tuple[int, str]:
    """(row count, sha256 over every row of the log in position order)."""
    h = hashlib.sha256()
    count = 0
    for n in services.ledger.recorder.select_notifications(start=1, limit=1_000_000):
        oid = UUID(str(n.originator_id)).hex  # a UUID (PostgreSQL) or its hex (SQLite)
        h.update(f"{n.id}\0{oid}\0{n.originator_version}\0{n.topic}\0{len(n.state)}\0".encode())
        h.update(n.state)
        count += 1
    return count, h.hexdigest()


def fixtures_at_a_fixed_path() -> Path:
    """The fixtures under one absolute path on every machine (a symlink, replaced
    atomically): a rejected input names its file by its absolute path
    (:func:`ledger.parsing.discover`), which is part of the stored rows."""
    root = Path("/tmp/hookledger-golden")
    if os.name != "posix":
        pytest.skip("needs /tmp and symlinks")
    root.mkdir(exist_ok=True)
    link = root / "fixtures"
    if not (link.is_symlink() and link.resolve() == FIXTURES.resolve()):
        tmp = root / f"fixtures.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(FIXTURES.resolve(), target_is_directory=True)
        os.replace(tmp, link)
    return link


def test_stored_rows_are_unchanged(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_app, "datetime", _FixedClock)
    for path in HOOK_FILES:
        for i, payload in enumerate(orjson.loads(path.read_bytes())):
            key = f"{path.relative_to(FIXTURES)}:{i}"
            ingest_hook(services.ledger, "claude-code", orjson.dumps(payload), key, RECORDED_AT)
    import_paths(services.ledger, [fixtures_at_a_fixed_path()])
    assert rows_digest(services) == (EXPECTED_EVENTS, EXPECTED_SHA256)
