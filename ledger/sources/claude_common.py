"""Rules shared by the Claude Code sources (hooks, transcripts, stream-json).

Source of the rules: ``shared/research/FORMATS.md`` A1–A4 and C15, and the ledger's
definition of a human prompt (issue "Core ledger", item 3).
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from ledger.observation import CACHE_1H, TOKENS, Observation, SessionRef, json_hash
from ledger.sources.jsonl import int_or_none

AGENT = "claude-code"

# Text parts starting with these are not typed by a human.
_NOT_HUMAN = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<system-reminder>",
    "<task-notification>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "Caveat:",
    "[Request interrupted",
)
_CMD_NAME = re.compile(r"<command-name>\s*([^<]{0,256}?)\s*</command-name>")
_CMD_ARGS = re.compile(r"<command-args>([^<]{0,65536})</command-args>")


def classify_prompt(parts: list[str]) -> tuple[str, str]:
    """Classify the text parts of one user input.

    Returns ``(prompt_kind, text)``: ``human`` (typed by a person; text = the human
    parts joined by newlines), ``command`` (a local slash command, one Claude Code runs
    itself with no model turn: ``/clear``, ``/model``, ``/effort high``; text =
    ``"/name args"`` so hook and transcript spellings agree), ``task_notification``, or
    ``other`` (meta/system text that is not a prompt at all).

    A prompt command (a custom or plugin command, ``/review``: its prompt is sent to
    the model, which answers in a turn) is a ``human`` prompt, text ``"/name args"``:
    Claude Code writes it with ``<command-message>`` first (then ``<command-name>``,
    ``<command-args>``, and the expanded prompt as the next, ``isMeta``, record), a
    local command with ``<command-name>`` first (then ``<local-command-stdout>``). Seen
    in real transcripts of 2.0.28 (``/generate-feature``), 2.1.38
    (``/handgemacht:create-beads``) and 2.1.170 (``/prime`` vs the local ``/effort``).
    """
    human = [p for p in parts if p.strip() and not p.lstrip().startswith(_NOT_HUMAN)]
    if human:
        return "human", "\n".join(human)
    joined = "\n".join(parts)
    stripped = joined.lstrip()
    m = _CMD_NAME.search(joined)
    if m:
        args = _CMD_ARGS.search(joined)
        text = m.group(1) + (" " + args.group(1).strip() if args and args.group(1).strip() else "")
        return ("human" if stripped.startswith("<command-message>") else "command"), text
    if stripped.startswith("<task-notification>"):
        return "task_notification", joined
    return "other", joined


def classify_hook_prompt(prompt: str) -> tuple[str, str]:
    """Classify ``UserPromptSubmit.prompt``. A slash command arrives as ``/name args``
    and is a prompt command (``human``, text ``/name args``, as the transcript's copy:
    :func:`classify_prompt`): ``UserPromptSubmit`` fires for the prompts the model gets,
    not for the local commands Claude Code runs itself (the real coorp session 4f65f198:
    its ``/prime …`` is a hook, its ``/effort ultracode`` only in the transcript;
    anthropics/claude-code#66892)."""
    stripped = prompt.strip()
    if re.match(r"/[A-Za-z0-9_:.\-]{1,128}(\s|$)", stripped):
        return "human", stripped
    return classify_prompt([prompt])


def text_hash(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_time(value: Any) -> datetime | None:
    """ISO-8601 timestamp (``Z`` or offset) to an aware datetime; None when unusable,
    also when its instant in UTC is outside years 1-9999 (``9999-12-31T23:00:00-02:00``):
    everything that reads the event converts its times to UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if dt.tzinfo is None:
            return None
        dt.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return dt


def child_ref(session_id: str, agent_id: str, agent_type: str | None, cwd: str | None) -> SessionRef:
    """The child session of a subagent run: ``"{session_id}/agent-{agent_id}"``."""
    return SessionRef(
        agent=AGENT,
        external_id=f"{session_id}/agent-{agent_id}",
        parent_external_id=session_id,
        agent_type=agent_type or None,
        cwd=cwd,
    )


def subagent_link(
    parent: SessionRef,
    agent_id: str,
    agent_type: str | None,
    tool_use_id: str | None,
    common: dict[str, Any],
) -> list[Observation]:
    """Lineage facts for a subagent run, on the parent and on the child stream."""
    child = child_ref(parent.external_id, agent_id, agent_type, parent.cwd)
    suffix = f":{tool_use_id}" if tool_use_id else ""
    out = [
        Observation(
            session=parent,
            kind="SubagentLinked",
            key=f"subagent:{agent_id}{suffix}",
            data={
                "child_id": child.id,
                "child_external_id": child.external_id,
                "agent_id": agent_id,
                "agent_type": agent_type or None,
                "tool_use_id": tool_use_id,
            },
            **common,
        )
    ]
    if tool_use_id:
        out.append(
            Observation(
                session=child,
                kind="LinkedToParent",
                key=f"parent:{tool_use_id}",
                data={"parent_id": parent.id, "parent_tool_use_id": tool_use_id},
                **common,
            )
        )
    return out


def tool_error_text(content: Any) -> str | None:
    """Error text of a failed tool result (string or list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(texts) or None
    return None


def usage_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """An Anthropic ``usage`` object (transcript ``message.usage``, stream-json
    ``assistant`` and ``result``) -> the ledger's four counts (:data:`TOKENS`, 0 when
    missing or not an integer) and :data:`CACHE_1H`: ``cache_creation
    .ephemeral_1h_input_tokens``, the 1-hour part of ``cache_creation_input_tokens``
    (FORMATS.md A3), kept within 0 and that total; 0 when the usage has no split (older
    builds; then every cache write is priced as a 5-minute one)."""
    tokens = {k: int_or_none(usage.get(k)) or 0 for k in TOKENS}
    split = usage.get("cache_creation")
    hour = int_or_none(split.get("ephemeral_1h_input_tokens")) if isinstance(split, dict) else None
    tokens[CACHE_1H] = max(0, min(hour or 0, tokens["cache_creation_input_tokens"]))
    return tokens


def usage_key(usage_id: str, tokens: dict[str, int]) -> str:
    """The ``UsageRecorded`` key of ``tokens`` for message ``usage_id``: a hash of the
    four counts only, as before the 1-hour split was kept, so a record read again by
    this version is the fact an earlier version stored (one usage, not two)."""
    return f"usage:{usage_id}:{json_hash({k: tokens[k] for k in TOKENS})}"
