"""Summaries and observations of prompt batches and sessions, from recorded facts.

:func:`deterministic_summary` is the default summariser: offline, no model, the same
facts always give the same summary. It reads what the ledger recorded about a batch (or a
whole session) — the prompt, the tool calls with their inputs and failures, the final
assistant message — and derives:

* ``files_read`` / ``files_edited``: paths from the agents' read and edit tools
  (Claude Code ``Read``/``Edit``/``MultiEdit``/``Write``/``NotebookEdit``; Codex
  ``file_change`` and ``apply_patch``; Gemini CLI ``read_file``/``write_file``/
  ``replace``; OpenClaw and Cursor ``read_file``/``edit_file``); see :data:`READ_TOOLS`,
  :data:`EDIT_TOOLS`. Tool input shapes: ``../shared/research/FORMATS.md``.
  A shell call that runs ``apply_patch`` (Codex: ``["bash", "-lc", "apply_patch <<'PATCH'
  …"]``) is an edit of the files its ``*** Update/Add/Delete File:`` lines name, not a
  command.
* ``commands_failed``: shell commands (``Bash``, ``shell``, ``run_shell_command``,
  ``shell_exec``, ``run_terminal``, …) whose tool call failed, in order, once each.
* observations: ``bug_fix`` (a command failed, files were edited, the same command then
  passed), ``gotcha`` (a command still failing at its latest run, or a tool that kept
  failing; a command that passed later is never called failing), ``decision`` (an approved plan, or
  a sentence of the final message that states a choice), ``trade_off`` and ``discovery``
  (sentences of the final message with those cues).

The LLM summariser (:mod:`ledger.llm_summary`) fills the same :class:`SummaryDraft`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.envelope import MemoryObservation

READ_TOOLS = frozenset(
    {"Read", "NotebookRead", "read_file", "read_many_files", "view_file", "View", "LS",
     "list_directory"}
)
EDIT_TOOLS = frozenset(
    {"Edit", "MultiEdit", "Write", "NotebookEdit", "write_file", "replace", "edit_file",
     "file_change", "apply_patch", "create_file", "str_replace_based_edit_tool"}
)
SHELL_TOOLS = frozenset(
    {"Bash", "shell", "exec_command", "local_shell", "run_shell_command", "shell_exec",
     "run_terminal", "run_terminal_cmd", "terminal"}
)
SEARCH_TOOLS = frozenset(
    {"Grep", "Glob", "search_file_content", "glob", "grep", "WebSearch", "WebFetch",
     "google_web_search", "web_fetch", "codebase_search"}
)
PLAN_TOOLS = frozenset({"ExitPlanMode"})

MAX_ITEMS = 8
"""At most this many entries in each list of a summary."""
MAX_TEXT = 300
"""Characters kept of one entry (a prompt, a sentence, an error line)."""

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("trade_off", re.compile(r"\btrade-?offs?\b|\bat the cost of\b|\bdownside\b", re.I)),
    ("decision", re.compile(r"\b(?:decided|chose|opted|went with|instead of)\b", re.I)),
    ("discovery", re.compile(r"\b(?:turns out|discovered|root cause|found that|caused by)\b", re.I)),
    ("gotcha", re.compile(r"\b(?:gotcha|careful|beware|pitfall|note that)\b", re.I)),
)
_LEARNED = re.compile(
    r"\b(?:because|root cause|turns out|caused by|the (?:issue|problem|bug) (?:was|is))\b", re.I
)
_NEXT = re.compile(
    r"\b(?:next step|next,|todo|remaining|follow-up|you (?:may|might|could|should)|"
    r"consider|still need)\b",
    re.I,
)


@dataclass(frozen=True)
class ToolFact:
    """One recorded tool call: ``name``, ``input`` (the parsed tool input, a dict when the
    agent sent an object), ``is_error`` and ``error`` (first part of the failure text)."""

    name: str
    input: Any
    is_error: bool = False
    error: str | None = None


@dataclass(frozen=True)
class SummaryFacts:
    """What the ledger recorded about one batch (``scope='batch'``) or one whole session
    (``scope='session'``; ``prompts`` then holds every batch's prompt)."""

    scope: str
    prompts: tuple[str, ...] = ()
    tools: tuple[ToolFact, ...] = ()
    final_message: str | None = None
    end_reason: str | None = None
    plans: tuple[str, ...] = ()
    turn_ended: bool = False
    """The agent's last reply ended its turn (``end_turn``): an ``idle_timeout`` end then
    only closed a finished turn."""


@dataclass
class SummaryDraft:
    """A summary before it becomes a :class:`~ledger.session.Session.Summarised` event
    (same field names; lists of short sentences)."""

    request: str | None = None
    investigated: list[str] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    files_edited: list[str] = field(default_factory=list)
    commands_failed: list[str] = field(default_factory=list)
    observations: list[MemoryObservation] = field(default_factory=list)

    def event_fields(self) -> dict[str, Any]:
        """The fields of a ``Summarised`` event (tuples, bounded)."""
        return {
            "request": self.request,
            **{
                name: tuple(getattr(self, name)[:MAX_ITEMS])
                for name in ("investigated", "learned", "completed", "next_steps")
            },
            "files_read": tuple(self.files_read),
            "files_edited": tuple(self.files_edited),
            "commands_failed": tuple(self.commands_failed),
            "observations": tuple(self.observations[:MAX_ITEMS]),
        }


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """One line, at most ``limit`` characters (an ellipsis marks a cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def shell_command(tool: ToolFact) -> str | None:
    """The command line of a shell tool call (Codex's ``["bash", "-lc", cmd]`` unwrapped)."""
    if tool.name not in SHELL_TOOLS or not isinstance(tool.input, dict):
        return None
    cmd = tool.input.get("command", tool.input.get("cmd"))
    if isinstance(cmd, list):
        parts = [str(p) for p in cmd]
        cmd = parts[-1] if len(parts) >= 3 and parts[1] in ("-lc", "-c") else " ".join(parts)
    return cmd.strip() if isinstance(cmd, str) and cmd.strip() else None


def shell_patch(tool: ToolFact) -> str | None:
    """The patch of a shell call that runs ``apply_patch`` (Codex records its edits as
    ``shell`` ``["bash", "-lc", "apply_patch <<'PATCH'\n*** Begin Patch …"]``), else None."""
    command = shell_command(tool)
    if command is None:
        return None
    if command.startswith("apply_patch") or "*** Begin Patch" in command:
        return command
    return None


def is_edit(tool: ToolFact) -> bool:
    """Whether a tool call is an edit: an edit tool, or a shell call running ``apply_patch``."""
    return tool.name in EDIT_TOOLS or shell_patch(tool) is not None


def tool_paths(tool: ToolFact) -> list[str]:
    """File paths a read or edit tool call names (empty for other tools)."""
    value = tool.input
    if isinstance(value, str) and tool.name == "apply_patch":
        return _PATCH_FILE.findall(value)
    patch = shell_patch(tool)
    if patch is not None:
        return _PATCH_FILE.findall(patch)
    if not isinstance(value, dict):
        return []
    paths = [
        value[k]
        for k in ("file_path", "path", "notebook_path", "absolute_path", "target_file")
        if isinstance(value.get(k), str)
    ]
    for change in value.get("changes") or ():  # Codex file_change
        if isinstance(change, dict) and isinstance(change.get("path"), str):
            paths.append(change["path"])
    for key in ("patch", "input"):  # apply_patch as a JSON tool
        if isinstance(value.get(key), str):
            paths.extend(_PATCH_FILE.findall(value[key]))
    if isinstance(value.get("paths"), list):  # read_many_files
        paths.extend(p for p in value["paths"] if isinstance(p, str))
    return paths


def first_line(error: str | None) -> str:
    """The first non-empty line of a failure text, clipped (``failed`` when there is none)."""
    for line in (error or "").splitlines():
        if line.strip():
            return clip(line, 160)
    return "failed"


_MARKUP = re.compile(r"^(?:[#>*+\-|]+|\d+[.)])\s*")


def _sentences(text: str | None) -> list[str]:
    """Sentences of a (Markdown) message: list markers and heading marks dropped; table
    rows and lines that are only a heading or bold label skipped."""
    out = []
    for part in _SENTENCE.split(text or ""):
        stripped = part.strip()
        if stripped.startswith("|") or (stripped.startswith("#") and len(stripped) < 80):
            continue
        if stripped.startswith("**") and stripped.rstrip(":").endswith("**"):
            continue
        sentence = _MARKUP.sub("", stripped).strip("*_ ")
        if len(sentence) > 3:
            out.append(clip(sentence))
    return out


def deterministic_summary(facts: SummaryFacts) -> SummaryDraft:
    """The offline summary of ``facts`` (see the module docstring for the rules)."""
    d = SummaryDraft(request=clip(facts.prompts[0]) if facts.prompts else None)
    edited: list[str] = []
    read: list[str] = []
    searches: list[str] = []
    failed: dict[str, tuple[int, str]] = {}  # command -> (index of first failure, error line)
    fixed: dict[str, list[str]] = {}  # command -> files edited between failure and pass
    last_ok: dict[str, bool] = {}  # command -> whether its latest run passed
    stuck_tools: dict[str, str] = {}
    for i, tool in enumerate(facts.tools):
        edit = is_edit(tool)
        if edit and not tool.is_error:
            edited.extend(tool_paths(tool))
        elif tool.name in READ_TOOLS and not tool.is_error:
            read.extend(tool_paths(tool))
        elif tool.name in SEARCH_TOOLS and isinstance(tool.input, dict):
            what = tool.input.get("pattern") or tool.input.get("query") or tool.input.get("url")
            if isinstance(what, str):
                searches.append(f"{tool.name} {clip(what, 120)}")
        command = None if edit else shell_command(tool)
        error_line = first_line(tool.error)
        if command is not None:
            last_ok[command] = not tool.is_error
            if tool.is_error:
                failed.setdefault(command, (i, error_line))
            elif command in failed and command not in fixed:
                start = failed[command][0]
                between = [p for t in facts.tools[start:i] if is_edit(t) and not t.is_error for p in tool_paths(t)]
                if between:
                    fixed[command] = _unique(between)
        elif tool.is_error and not edit and tool.name not in READ_TOOLS:
            stuck_tools.setdefault(tool.name, error_line)
    d.files_edited = _unique(edited)
    d.files_read = [p for p in _unique(read) if p not in d.files_edited]
    d.commands_failed = list(failed)
    if len(facts.prompts) > 1:
        d.investigated.append(f"{len(facts.prompts)} prompts, the last: {clip(facts.prompts[-1], 160)}")
    if d.files_read:
        d.investigated.append("Read " + ", ".join(d.files_read[:MAX_ITEMS]))
    d.investigated.extend(_unique(searches)[:MAX_ITEMS])
    for command, (_, error) in failed.items():
        if command in fixed:
            d.learned.append(f"`{clip(command, 120)}` failed ({error}) until {', '.join(fixed[command])} changed")
            d.observations.append(MemoryObservation(
                kind="bug_fix", title=f"Fixed failing `{clip(command, 120)}`",
                detail=f"It failed with: {error}. It passed after editing {', '.join(fixed[command])}.",
                files=tuple(fixed[command]),
            ))
        if not last_ok[command]:  # still failing at its latest run
            d.observations.append(MemoryObservation(
                kind="gotcha", title=f"`{clip(command, 120)}` fails", detail=error,
            ))
            d.next_steps.append(f"Make `{clip(command, 120)}` pass ({error})")
    for name, error in stuck_tools.items():
        d.observations.append(MemoryObservation(kind="gotcha", title=f"{name} failed", detail=error))
    sentences = _sentences(facts.final_message)
    d.learned.extend(s for s in sentences if _LEARNED.search(s))
    if d.files_edited:
        d.completed.append("Edited " + ", ".join(d.files_edited[:MAX_ITEMS]))
    passed = [c for c in failed if last_ok[c]]
    if passed:
        d.completed.append("Now passing: " + ", ".join(f"`{clip(c, 80)}`" for c in passed))
    if sentences:
        d.completed.append(sentences[0])
    d.next_steps.extend(s for s in sentences if _NEXT.search(s))
    idle_after_done = facts.turn_ended and (facts.end_reason or "").startswith("idle_timeout")
    if facts.end_reason and facts.end_reason.startswith(("turn_aborted", "idle_timeout", "run_failed")) and not idle_after_done:
        d.next_steps.append(f"Unfinished: the batch ended with {facts.end_reason}")
    for plan in facts.plans:
        d.observations.append(MemoryObservation(kind="decision", title="Plan approved: " + clip(plan, 120), detail=clip(plan, 600)))
    for sentence in sentences:
        for kind, cue in _CUES:
            if cue.search(sentence):
                files = tuple(p for p in d.files_edited if p.rsplit("/", 1)[-1] in sentence)
                d.observations.append(MemoryObservation(kind=kind, title=sentence, files=files))  # type: ignore[arg-type]
                break
    d.learned = _unique(d.learned)
    d.next_steps = _unique(d.next_steps)
    return d
