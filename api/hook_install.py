"""Adding hookledger to (and removing it from) Claude Code's ``settings.json``.

Format: ``{"hooks": {"<EventName>": [{"matcher": "*", "hooks": [{"type": "command",
"command": "...", "timeout": 10}]}]}}`` (code.claude.com/docs/en/hooks; ``matcher``
only for tool events). Events: every Claude Code hook event in FORMATS.md A1.

The command written is the cheapest that captures a hook: the real interpreter
(``os.path.realpath(sys.executable)``, never a version-manager shim) with ``-S`` and the
absolute path of the standard-library hot path's launcher ``api/hot_path/run.py``
(:mod:`api.hot_path.hook_fast`, bytecode precompiled), the data directory baked in
(and the server URL, with ``--url``). Entries are recognised as ours by that command
without its interpreter and URL (:func:`family`), so other hooks are never touched, and
hooks installed with any ``--url``, or by another name of the interpreter (a
virtualenv's ``bin/python`` and ``bin/python3`` are copies that ``realpath`` does not
unify), are found by ``install``, ``uninstall`` and ``doctor``.

* :func:`install` merges (other hooks kept; ours installed with another URL or
  interpreter get the new command), writes a backup ``settings.json.hookledger-<UTC time>.bak`` of the previous
  bytes (when there were any) and is idempotent (no change, no write, no backup). The
  file keeps its permissions (it may hold API keys in ``env``), the backup gets the
  same, and a symlinked settings file (dotfiles) is written through the link.
* :func:`uninstall` removes exactly our entries; when what is left equals the backed-up
  original it writes the original bytes back, byte for byte (or deletes the file if
  there was none before).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import api.hot_path
from ledger.sources.claude_hooks import HOOK_EVENTS

HOT_PATH = Path(api.hot_path.__file__).resolve().parent

EVENTS = HOOK_EVENTS
"""FORMATS.md A1: every event ``ledger.sources.claude_hooks`` parses."""
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"})
TIMEOUT_S = 10
BACKUP_GLOB = ".hookledger-*.bak"
NO_ORIGINAL = b"hookledger: there was no settings file before install\n"


class SettingsError(ValueError):
    """The settings file is not a JSON object (it is left untouched)."""


@dataclass
class Change:
    path: Path
    changed: bool
    events: list[str] = field(default_factory=list)
    backup: Path | None = None
    restored: bool = False


def settings_path(scope: str, cwd: Path | None = None, home: Path | None = None) -> Path:
    """``~/.claude/settings.json`` (user) or ``<cwd>/.claude/settings.json`` (project)."""
    if scope == "user":
        return (home or Path.home()) / ".claude" / "settings.json"
    if scope == "project":
        return (cwd or Path.cwd()) / ".claude" / "settings.json"
    raise ValueError(f"unknown scope {scope!r} (user or project)")


def hook_command(data_dir: Path, agent: str = "claude-code", url: str | None = None) -> str:
    """The shell command Claude Code runs for each hook."""
    parts = [
        os.path.realpath(sys.executable),
        "-S",
        str(HOT_PATH / "run.py"),
        agent,
        str(data_dir.expanduser().resolve()),
    ]
    if url:
        parts.append(url)
    return " ".join(shlex.quote(p) for p in parts)


def family(command: str) -> str:
    """``command`` (a :func:`hook_command`) without its interpreter and server URL:
    ``-S <hot path> <agent> <data dir>``, what every hook entry of the same agent and
    data directory holds."""
    return " ".join(shlex.quote(p) for p in shlex.split(command)[1:5])


def hook_url(command: str) -> str | None:
    """The server URL baked into a :func:`hook_command`, if any."""
    parts = shlex.split(command)
    return parts[5] if len(parts) > 5 else None


def load_settings(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    """(bytes or None when absent, parsed object; ``{}`` when absent or blank).

    Raises:
        SettingsError: not a JSON object, or ``hooks`` not an object.
    """
    if not path.exists():
        return None, {}
    raw = path.read_bytes()
    if not raw.strip():
        return raw, {}
    try:
        value = json.loads(raw)
    except ValueError as e:
        raise SettingsError(f"{path} is not valid JSON ({e}); not changed") from e
    if not isinstance(value, dict):
        raise SettingsError(f"{path} holds a JSON {type(value).__name__}, not an object")
    hooks = value.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SettingsError(f"{path}: 'hooks' is not an object; not changed")
    return raw, value


def _write(path: Path, value: dict[str, Any]) -> None:
    """Replace the file's content atomically, through a symlink, keeping its mode."""
    target = path.resolve() if path.is_symlink() else path
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".hookledger-tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if target.exists():
        os.chmod(tmp, target.stat().st_mode & 0o7777)
    os.replace(tmp, target)


def _ours(entry: Any, command: str) -> bool:
    """Whether a hook entry runs ``command``, with any interpreter and server URL."""
    if not (isinstance(entry, dict) and entry.get("type") == "command"):
        return False
    found = entry.get("command")
    if not isinstance(found, str) or family(command) not in found:
        return False
    try:
        parts = shlex.split(found)
    except ValueError:  # someone else's command with unbalanced quotes
        return False
    return len(parts) in (5, 6) and parts[1:5] == shlex.split(command)[1:5]


def installed_urls(value: dict[str, Any], command: str) -> list[str]:
    """The server URLs baked into our entries (``install-hooks --url``), sorted."""
    hooks = value.get("hooks") if isinstance(value.get("hooks"), dict) else {}
    urls = {
        url
        for groups in hooks.values() if isinstance(groups, list)
        for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)
        for h in g["hooks"] if _ours(h, command) and (url := hook_url(h["command"]))
    }
    return sorted(urls)


def installed_events(value: dict[str, Any], command: str) -> list[str]:
    """Events whose hooks include ``command`` (with any server URL)."""
    hooks = value.get("hooks") if isinstance(value.get("hooks"), dict) else {}
    return [
        event
        for event, groups in hooks.items()
        if isinstance(groups, list)
        and any(
            isinstance(g, dict)
            and isinstance(g.get("hooks"), list)
            and any(_ours(h, command) for h in g["hooks"])
            for g in groups
        )
    ]


def precompile() -> bool:
    """Write the hot path's bytecode cache (``__pycache__``) so hooks never compile it;
    False when the directory is read-only (hooks then compile it on each call)."""
    import py_compile

    try:
        py_compile.compile(str(HOT_PATH / "hook_fast.py"), doraise=True)
    except (OSError, py_compile.PyCompileError):
        return False
    return True


def install(path: Path, command: str) -> Change:
    """Add ``command`` for every event in :data:`EVENTS` that lacks it (and
    :func:`precompile` the hot path).

    Raises:
        SettingsError: the file is not a JSON object (nothing written).
    """
    raw, value = load_settings(path)
    precompile()
    have = set(installed_events(value, command))
    missing = [e for e in EVENTS if e not in have]
    updated = _set_url(value, command)
    if not missing and not updated:
        return Change(path, changed=False)
    hooks = value.setdefault("hooks", {})
    for event in missing:
        group: dict[str, Any] = {"matcher": "*"} if event in TOOL_EVENTS else {}
        group["hooks"] = [{"type": "command", "command": command, "timeout": TIMEOUT_S}]
        groups = hooks.get(event)
        if not isinstance(groups, list):
            groups = hooks[event] = []
        groups.append(group)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup = path.with_name(f"{path.name}.hookledger-{stamp}.bak")
    n = 1
    while backup.exists():
        n += 1
        backup = path.with_name(f"{path.name}.hookledger-{stamp}-{n}.bak")
    path.parent.mkdir(parents=True, exist_ok=True)
    backup.write_bytes(raw if raw is not None else NO_ORIGINAL)
    if raw is not None:
        os.chmod(backup, path.stat().st_mode & 0o7777)
    _write(path, value)
    return Change(path, changed=True, events=sorted({*missing, *updated}), backup=backup)


def _set_url(value: dict[str, Any], command: str) -> list[str]:
    """Give our entries installed with another server URL or interpreter ``command``;
    the events changed."""
    hooks = value.get("hooks") if isinstance(value.get("hooks"), dict) else {}
    changed = []
    for event, groups in hooks.items():
        for group in groups if isinstance(groups, list) else []:
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if _ours(entry, command) and entry["command"] != command:
                    entry["command"] = command
                    changed.append(event)
    return changed


def uninstall(path: Path, command: str) -> Change:
    """Remove every hook entry running ``command`` (groups and events left empty by
    that go too); restore the original bytes when the rest equals them.

    Raises:
        SettingsError: the file is not a JSON object (nothing written).
    """
    value = load_settings(path)[1]
    events = installed_events(value, command)
    if not events:
        return Change(path, changed=False)
    hooks = value["hooks"]
    for event in events:
        kept = []
        for group in hooks[event]:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                rest = [h for h in group["hooks"] if not _ours(h, command)]
                if not rest and len(rest) != len(group["hooks"]):
                    continue
                group = {**group, "hooks": rest}
            kept.append(group)
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    original = _original(path, command)
    if original is not None and _same(original, value):
        if original == NO_ORIGINAL:
            path.unlink()
        else:
            path.write_bytes(original)
        return Change(path, changed=True, events=events, restored=True)
    if not hooks:
        del value["hooks"]
    _write(path, value)
    return Change(path, changed=True, events=events)


def _original(path: Path, command: str) -> bytes | None:
    """The newest backup without ``command`` (with any URL) in it: the content before
    the install."""
    base = family(command)
    for backup in sorted(
        path.parent.glob(path.name + BACKUP_GLOB), key=lambda b: b.stat().st_mtime_ns, reverse=True
    ):
        data = backup.read_bytes()
        if base.encode() not in data and json.dumps(base)[1:-1].encode() not in data:
            return data
    return None


def _same(original: bytes, value: dict[str, Any]) -> bool:
    if original == NO_ORIGINAL or not original.strip():
        before: Any = {}
    else:
        try:
            before = json.loads(original)
        except ValueError:
            return False
    after = dict(value)
    if after.get("hooks") == {} and "hooks" not in before:
        del after["hooks"]
    return before == after
