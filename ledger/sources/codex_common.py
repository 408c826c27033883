"""Rules shared by the Codex sources (exec --json, rollout files, hooks).

Token convention (the ledger's, Anthropic's): Codex reports ``input_tokens`` *including*
``cached_input_tokens`` and ``output_tokens`` *including* ``reasoning_output_tokens``
(``shared/research/FORMATS.md`` A6). The ledger records ``input_tokens = input - cached``,
``cache_read_input_tokens = cached``, ``output_tokens = output`` and (CLI >= 0.146)
``cache_creation_input_tokens = cache_write_input_tokens`` (also taken out of input), so
``input + output + cache_read + cache_creation`` equals Codex's ``total_tokens``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ledger import jsontext
from ledger.sources.jsonl import int_or_none

AGENT = "codex"

_REFUSED = re.compile(r"failed in sandbox |\S+ rejected by user")
"""Plain-text outputs of a call Codex did not run (sandbox failure, the user said no)."""
_EXITED = re.compile(r"Process exited with code (-?\d+)")
"""The status line of the text newer Codex gives the model for a command (and a
``PostToolUse`` hook as ``tool_response``), in the header before ``Output:``:
``Chunk ID: …⏎Wall time: …⏎Process exited with code 7⏎…⏎Output:⏎…`` (openai/codex#45917,
#34289: no structured exit code reaches the hook)."""
_BODY = ("Output:", "Final output:")


def maybe_json(value: Any) -> Any:
    """Codex writes tool arguments and outputs as JSON strings; decode them when they are."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return jsontext.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def call_failure(output: Any) -> tuple[bool, str | None]:
    """``(is_error, error)`` of a tool call's output as Codex gives it to the model (a
    rollout's ``function_call_output.output``, a ``PostToolUse`` hook's
    ``tool_response``; a JSON string is decoded first): failed when its exit code
    (``metadata.exit_code``, or a top-level ``exit_code``, or in a text output the
    ``Process exited with code N`` line of its header) is not 0, or when it is Codex's
    text for a call it did not run (``failed in sandbox …``, ``patch rejected by user``;
    ``error``: its first line)."""
    output = maybe_json(output)
    text = _text_of(output)
    if text is not None:
        if _REFUSED.match(text):
            return True, text.splitlines()[0][:200] if text.strip() else text
        code = _exit_line(text)
        if code is not None and code != 0:
            return True, f"exit code {code}"
    if not isinstance(output, dict):
        return False, None
    meta = output.get("metadata") if isinstance(output.get("metadata"), dict) else {}
    exit_code = int_or_none(meta.get("exit_code"))
    if exit_code is None:
        exit_code = int_or_none(output.get("exit_code"))
    if exit_code is not None and exit_code != 0:
        return True, f"exit code {exit_code}"
    return False, None


def _text_of(output: Any) -> str | None:
    """The text of an output Codex gave as text: a string, or an ``input_text`` content
    item (0.146 rollouts: alone, or the first of a list)."""
    if isinstance(output, list) and output:
        output = output[0]
    if isinstance(output, dict) and output.get("type") in ("input_text", "output_text"):
        output = output.get("text")
    return output if isinstance(output, str) else None


def _exit_line(text: str) -> int | None:
    """The code of a ``Process exited with code N`` line in the header of a command's
    text (the lines before ``Output:``; the command's own output never counts)."""
    for line in text[:2000].splitlines()[:12]:
        line = line.strip()
        if line in _BODY:
            return None
        m = _EXITED.fullmatch(line)
        if m:
            return int(m.group(1))
    return None


def ledger_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """A Codex usage object -> the ledger's four token counts (see the module docstring)."""
    total_in = int_or_none(usage.get("input_tokens")) or 0
    cached = int_or_none(usage.get("cached_input_tokens")) or 0
    written = int_or_none(usage.get("cache_write_input_tokens")) or 0
    return {
        "input_tokens": max(0, total_in - cached - written),
        "output_tokens": int_or_none(usage.get("output_tokens")) or 0,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
    }


def has_usage(usage: Any) -> bool:
    """True for a usage object with at least one of Codex's token counts."""
    return isinstance(usage, dict) and any(
        isinstance(usage.get(k), int)
        for k in ("input_tokens", "cached_input_tokens", "output_tokens")
    )


def subtract(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: now[k] - before.get(k, 0) for k in now}
