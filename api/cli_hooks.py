"""CLI: ``install-hooks``, ``uninstall-hooks`` and ``doctor`` (see :mod:`api.hook_install`).

Registered on the ``hookledger`` group in :mod:`api.cli`.
"""

from __future__ import annotations

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
@click.option("--scope", type=click.Choice(SCOPES), default="user", show_default=True)
@click.option("--url", default=None, help="The --url given to install-hooks, if any.")
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
@click.option("--json", "as_json", is_flag=True)
@click.option("--url", default=None, help="Server URL (default: HOOKLEDGER_URL or :8765).")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool, url: str | None) -> None:
    """Check: hooks installed, server reachable, spool empty. Exit 1 if any is not."""
    import urllib.request

    from api.hook_install import (
        EVENTS,
        SettingsError,
        installed_events,
        load_settings,
        settings_path,
    )
    from api.hot_path.hook_fast import DEFAULT_URL
    from ledger.journal import JOURNAL

    command = _command(ctx, None)
    report: dict[str, Any] = {"hooks": {}, "command": command}
    for scope in SCOPES:
        path = settings_path(scope)
        try:
            events = installed_events(load_settings(path)[1], command)
        except (SettingsError, OSError) as e:
            events, report["hooks"][scope] = [], {"path": str(path), "error": str(e)}
            continue
        report["hooks"][scope] = {
            "path": str(path), "events": events, "missing": [e for e in EVENTS if e not in events],
        }
    hooks_ok = any(not h.get("missing", EVENTS) for h in report["hooks"].values())

    target = (url or os.environ.get("HOOKLEDGER_URL") or DEFAULT_URL).rstrip("/")
    try:
        with urllib.request.urlopen(target + "/healthz", timeout=2) as resp:
            server: dict[str, Any] = {"url": target, "reachable": True, "status": resp.status}
    except Exception as e:
        server = {"url": target, "reachable": False, "error": str(e)}

    spool_dir: Path = ctx.obj["settings"].data_dir / "spool"
    pending = sorted(
        p.name for p in (spool_dir.iterdir() if spool_dir.is_dir() else [])
        if p.is_file() and (p.name != JOURNAL or p.stat().st_size > 0)
    )
    report["server"] = server
    report["spool"] = {"path": str(spool_dir), "empty": not pending, "pending": pending}
    report["ok"] = hooks_ok and server["reachable"] and not pending
    if as_json:
        dump(report)
    else:
        for scope, h in report["hooks"].items():
            state = "error: " + h["error"] if "error" in h else (
                "installed" if not h["missing"] else f"missing {len(h['missing'])}/{len(EVENTS)}")
            click.echo(f"hooks ({scope}) {h['path']}: {state}")
        click.echo(f"server {target}: {'reachable' if server['reachable'] else 'NOT reachable'}")
        click.echo(f"spool {spool_dir}: {'empty' if not pending else ', '.join(pending)}")
    ctx.exit(0 if report["ok"] else 1)
