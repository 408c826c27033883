"""``hookledger hook <agent>``: the readable entry point of the hook client.

Same logic as the hot path :mod:`api.hot_path.hook_fast` (which ``install-hooks`` writes, run
with ``python -S`` for speed): the payload on stdin, ``<private>`` content removed, is
journalled, then (remote ``HOOKLEDGER_URL``) the journal is forwarded, ``SessionStart``
gets context from the server; always prints valid hook output and exits 0.
"""

from __future__ import annotations

import sys

from api.hot_path.hook_fast import handle, uuid7

__all__ = ["run", "uuid7"]


def run(
    agent: str, data_dir: str | None, url: str | None = None, stdin: bytes | None = None
) -> int:
    """Handle one hook call; prints the hook output. Returns 0 (never raises on a
    failure to capture: the reason goes to stderr).

    ``agent``: ``claude-code``, ``codex``, ``gemini``, ``cursor`` or ``openclaw`` (another
    name is journalled too, the server keeps it as rejected input with the reason, and
    stderr says so). ``stdin`` (default:
    read standard input): the agent's hook payload, one JSON object as the agent sends
    it (docs/agents.md, ``shared/research/FORMATS.md`` A1 for Claude Code). ``data_dir``:
    where the local spool lives; ``url``: the server (default ``HOOKLEDGER_URL``, else
    ``http://127.0.0.1:8765``). The output is ``{}``, or at ``SessionStart`` the
    server's context as ``hookSpecificOutput`` (docs/hooks.md)."""
    out = "{}"
    try:
        body = sys.stdin.buffer.read() if stdin is None else stdin
        if not data_dir:
            raise OSError("no data directory")
        out = handle(agent, data_dir, body, url)
    except Exception as e:
        sys.stderr.write(f"hookledger hook: {e}\n")
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    return 0
