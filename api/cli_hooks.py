"""CLI: ``install-hooks``, ``uninstall-hooks``, ``doctor`` and ``forward-spool`` (see
:mod:`api.hook_install` and :mod:`api.hot_path.hook_fast`).

Registered on the ``hookledger`` group in :mod:`api.cli`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from api.cli_context import dump

AGENTS = ("claude-code",)
SCOPES = ("user", "project")


def _command(ctx: click.Context, url: str | None) -> str:
    from api.hook_install import hook_command

    return hook_command(ctx.obj["settings"].data_dir, url=url)


@click.command("install-hooks")
@click.argument("agent", type=click.Choice(AGENTS))
@click.option("--scope", type=click.Choice(SCOPES), default="user", show_default=True,
              help="user: ~/.claude/settings.json; project: ./.claude/settings.json")
@click.option("--url", default=None,
              help="Server URL baked into the hook (default: HOOKLEDGER_URL at hook time, "
                   "else http://127.0.0.1:8765).")
@click.pass_context
def install_hooks(ctx: click.Context, agent: str, scope: str, url: str | None) -> None:
    """Add hookledger to the agent's settings for every hook event (other hooks kept)."""
    from api.hook_install import SettingsError, install, settings_path

    path = settings_path(scope)
    try:
        change = install(path, _command(ctx, url))
    except SettingsError as e:
        raise click.ClickException(str(e)) from e
    if not change.changed:
        click.echo(f"already installed in {path}; nothing changed")
        return
    click.echo(f"installed {len(change.events)} hooks in {path} (backup: {change.backup})")


@click.command("uninstall-hooks")
@click.argument("agent", type=click.Choice(AGENTS))
@click.option("--scope", type=click.Choice(SCOPES), default="user", show_default=True,
              help="user: ~/.claude/settings.json; project: ./.claude/settings.json")
@click.option("--url", default=None,
              help="Ignored: hooks installed with any --url are removed.")
@click.pass_context
def uninstall_hooks(ctx: click.Context, agent: str, scope: str, url: str | None) -> None:
    """Remove exactly the hooks install-hooks added (restoring the original file)."""
    from api.hook_install import SettingsError, settings_path, uninstall

    path = settings_path(scope)
    try:
        change = uninstall(path, _command(ctx, url))
    except SettingsError as e:
        raise click.ClickException(str(e)) from e
    if not change.changed:
        click.echo(f"no hookledger hooks in {path}; nothing changed")
        return
    how = "original content restored" if change.restored else "other hooks kept"
    click.echo(f"removed {len(change.events)} hooks from {path} ({how})")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object: hooks, server, spool, ok.")
@click.option("--url", default=None,
              help="Server URL (default: the one install-hooks --url wrote, else "
                   "HOOKLEDGER_URL, else :8765).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, url: str | None) -> None:
    """Check: hooks installed, server reachable, spool empty. Exit 1 if any is not."""
    from urllib.parse import urlsplit

    from api.hook_install import (
        EVENTS,
        SettingsError,
        installed_events,
        installed_urls,
        load_settings,
        settings_path,
    )
    from api.hot_path.hook_fast import DEFAULT_URL, REFUSED_FILE, http, is_loopback_host
    from ledger.journal import JOURNAL

    command = _command(ctx, None)
    report: dict[str, Any] = {"hooks": {}, "command": command}
    baked: list[str] = []
    for scope in SCOPES:
        path = settings_path(scope)
        try:
            value = load_settings(path)[1]
            events = installed_events(value, command)
        except (SettingsError, OSError) as e:
            events, report["hooks"][scope] = [], {"path": str(path), "error": str(e)}
            continue
        urls = installed_urls(value, command)
        baked += urls
        report["hooks"][scope] = {
            "path": str(path), "events": events, "missing": [e for e in EVENTS if e not in events],
            "urls": urls,
        }
    hooks_ok = any(not h.get("missing", EVENTS) for h in report["hooks"].values())

    # the server the hooks send to: --url, else the one install-hooks --url baked in
    target = (url or (baked[0] if baked else None) or os.environ.get("HOOKLEDGER_URL")
              or DEFAULT_URL).rstrip("/")
    settings = ctx.obj["settings"]
    try:  # as the hooks ask it: their HTTP client, with HOOKLEDGER_TOKEN when set
        status, health = http("GET", target, "/healthz", None, {}, 2)
        server: dict[str, Any] = {"url": target, "reachable": status == 200, "status": status}
        if status == 200 and is_loopback_host(urlsplit(target).hostname or ""):
            # the hooks spool into this data directory; only a server on it drains that
            theirs = json.loads(health).get("data_dir_id")
            server["same_data_dir"] = theirs == settings.data_dir_id()
            if theirs is not None and not server["same_data_dir"]:
                server["error"] = (
                    f"this server serves another data directory than {settings.data_dir}, "
                    "where the hooks spool: start it with this --data-dir, or install the "
                    "hooks with the server's"
                )
        if status == 200:  # /healthz is open: does the server take the hooks' token?
            status, _ = http("GET", target, "/v1/sessions?limit=1", None, {}, 2)
            server["accepts_token"] = status == 200
            if status in (401, 403):
                server["reachable"] = False
                server["error"] = (
                    f"the server refuses the token (HTTP {status}): set HOOKLEDGER_TOKEN "
                    "to the server's token where the hooks run"
                )
    except Exception as e:
        server = {"url": target, "reachable": False, "error": str(e)}

    spool_dir: Path = settings.data_dir / "spool"
    def holds_records(p: Path) -> bool:
        if p.name.endswith(".aside") or p.name == REFUSED_FILE:
            return True
        try:  # the server may have renamed it aside since the listing: drained
            return p.name == JOURNAL and p.stat().st_size > 0
        except FileNotFoundError:
            return False

    pending = sorted(
        p.name for p in (spool_dir.iterdir() if spool_dir.is_dir() else []) if holds_records(p)
    )
    report["server"] = server
    report["spool"] = {"path": str(spool_dir), "empty": not pending, "pending": pending}
    report["ok"] = (hooks_ok and server["reachable"] and not pending
                    and server.get("same_data_dir", True))
    if as_json:
        dump(report)
    else:
        for scope, h in report["hooks"].items():
            state = "error: " + h["error"] if "error" in h else (
                "installed" if not h["missing"] else f"missing {len(h['missing'])}/{len(EVENTS)}")
            if h.get("urls"):
                state += f" (sending to {', '.join(h['urls'])})"
            click.echo(f"hooks ({scope}) {h['path']}: {state}")
        state = "reachable" if server["reachable"] else "NOT reachable"
        click.echo(f"server {target}: {state}" + (f" ({server['error']})" if "error" in server else ""))
        click.echo(f"spool {spool_dir}: {'empty' if not pending else ', '.join(pending)}")
        if pending and server["reachable"]:
            click.echo("  a remote server ingests it after `hookledger forward-spool --url URL`;"
                       " a local one on this data directory drains it by itself")
    ctx.exit(0 if report["ok"] else 1)


@click.command("forward-spool")
@click.option("--url", default=None, help="Server URL (default: HOOKLEDGER_URL or :8765).")
@click.pass_context
def forward_spool_cmd(ctx: click.Context, url: str | None) -> None:
    """Send the hook spool to a (remote) server now; exit 1 if some is left.

    What a remote hook spooled while the server was unreachable goes to
    POST /v1/journal in pieces of about 1 MiB (every remote hook also does this by
    itself, after journalling its payload). Sending twice appends nothing twice.
    Records a proxy in front of the server refused for their size (HTTP 413), kept in
    spool/hooks.refused, are sent again too."""
    from api.hot_path.hook_fast import DEFAULT_URL, REFUSED_FILE, forward_spool, retry_refused

    target = (url or os.environ.get("HOOKLEDGER_URL") or DEFAULT_URL).rstrip("/")
    spool_dir = ctx.obj["settings"].data_dir / "spool"
    retry_refused(str(spool_dir))
    sent, done = forward_spool(target, str(spool_dir))
    refused = (spool_dir / REFUSED_FILE).exists()
    click.echo(f"forwarded {sent} bytes to {target}; spool "
               + ("empty" if done and not refused else "NOT empty (" + (
                   f"{REFUSED_FILE}: refused for their size by something in front of the server"
                   if done else "server unreachable or refused, or another forwarder is running"
               ) + ")"))
    ctx.exit(0 if done and not refused else 1)
