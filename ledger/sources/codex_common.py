"""Rules shared by the Codex sources (exec --json, rollout files, hooks).

Token convention (the ledger's, Anthropic's): Codex reports ``input_tokens`` *including*
``cached_input_tokens`` and ``output_tokens`` *including* ``reasoning_output_tokens``
(``shared/research/FORMATS.md`` A6). The ledger records ``input_tokens = input - cached``,
``cache_read_input_tokens = cached``, ``output_tokens = output`` and (CLI >= 0.146)
``cache_creation_input_tokens = cache_write_input_tokens`` (also taken out of input), so
``input + output + cache_read + cache_creation`` equals Codex's ``total_tokens``.
"""

from __future__ import annotations

from typing import Any

from ledger.sources.jsonl import int_or_none

AGENT = "codex"


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
