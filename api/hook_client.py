"""The hook client: what an agent runs on every hook event. Standard library only.

Reads one payload from stdin, gives it a capture key (UUIDv7) and capture time once,
and POSTs it to the server (``HOOKLEDGER_URL``, default http://127.0.0.1:8765) with a
2 s timeout. If the server cannot be reached the payload is appended, whole, to the
spool journal ``<data dir>/spool/<agent>.jsonl`` (the server ingests and trims it).
Always exits 0 and prints valid hook output (``{}``): a hook never blocks its agent.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

DEFAULT_URL = "http://127.0.0.1:8765"


def uuid7() -> str:
    """RFC 9562 UUIDv7: 48-bit ms timestamp, then random bits."""
    ms = time.time_ns() // 1_000_000
    rnd = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rnd >> 68 & 0xFFF) << 64 | 0b10 << 62 | rnd & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def spool_append(spool_dir: str, agent: str, line: bytes) -> None:
    """Append one journal line under an exclusive lock; safe with many hook processes.

    If the file was renamed away by the ingester between open and lock, reopen.
    """
    os.makedirs(spool_dir, exist_ok=True)
    path = os.path.join(spool_dir, f"{agent}.jsonl")
    for _ in range(10):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.write(fd, line)
                os.fsync(fd)
                return
        finally:
            os.close(fd)


def journal_line(
    agent: str, body: bytes, capture_key: str, captured_at: str, redactions: list[dict] | None = None
) -> bytes:
    """One spool journal line; ``redactions`` (kind, path, count) applied at the edge."""
    entry = {"agent": agent, "key": capture_key, "at": captured_at, "body": body.decode("utf-8", "surrogateescape")}
    if redactions:
        entry["redactions"] = redactions
    return json.dumps(entry).encode("ascii") + b"\n"


def run(agent: str, data_dir: str | None, url: str | None = None, stdin: bytes | None = None) -> int:
    body = sys.stdin.buffer.read() if stdin is None else stdin
    key = uuid7()
    at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    target = (url or os.environ.get("HOOKLEDGER_URL") or DEFAULT_URL).rstrip("/")
    try:
        req = urllib.request.Request(
            f"{target}/v1/hooks/{agent}",
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Hookledger-Capture-Key": key,
                "X-Hookledger-Captured-At": at,
                **({"Authorization": f"Bearer {os.environ['HOOKLEDGER_TOKEN']}"} if os.environ.get("HOOKLEDGER_TOKEN") else {}),
            },
        )
        with urllib.request.urlopen(req, timeout=2) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        # The server answered: 4xx means it recorded the body as rejected input.
        if e.code >= 500 and data_dir:
            _spool(data_dir, agent, body, key, at)
    except Exception:
        if data_dir:
            _spool(data_dir, agent, body, key, at)
    sys.stdout.write("{}\n")
    return 0


def _spool(data_dir: str, agent: str, body: bytes, key: str, at: str) -> None:
    """Privacy at the edge: ``<private>`` spans and secrets never reach the spool file."""
    from ledger.privacy import redact_text

    text, redactions = redact_text(body.decode("utf-8", "surrogateescape"))
    if redactions:
        body = text.encode("utf-8", "surrogateescape")
    try:
        spool_append(os.path.join(data_dir, "spool"), agent, journal_line(agent, body, key, at, redactions))
    except OSError:
        pass
