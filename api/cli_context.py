"""Helpers shared by the CLI command modules (``api/cli*.py``).

``services(ctx)`` builds the :class:`api.bootstrap.Services` of the current command
once, from the :class:`ledger.config.Settings` the ``hookledger`` group put on the
click context, and closes them when the command ends.
"""

from __future__ import annotations

import json
from typing import Any

import click


def services(ctx: click.Context) -> Any:
    """The command's :class:`api.bootstrap.Services` (built on first use).

    Raises:
        click.ClickException: the configuration is refused (exit 1, the reason on
            stderr), e.g. an event-store setting hookledger does not support.
    """
    obj = ctx.ensure_object(dict)
    if "services" not in obj:
        obj["services"] = build_services(obj["settings"])
        ctx.call_on_close(obj["services"].close)
    return obj["services"]


def build_services(settings: Any, **kwargs: Any) -> Any:
    """:func:`api.bootstrap.build`, with what keeps the stores from opening turned into
    a :class:`click.ClickException` carrying the reason (exit 1, one line, no
    traceback): a refused configuration (``ValueError``), a data directory that cannot
    be created or written (``OSError``; a read-only copy: SQLite's "attempt to write a
    readonly database"), a database that does not answer."""
    import sqlite3

    from eventsourcing.persistence import PersistenceError
    from sqlalchemy.exc import SQLAlchemyError

    from api.bootstrap import build

    where = "the database" if settings.database_url else f"data directory {settings.data_dir}"
    try:
        return build(settings, **kwargs)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    except (OSError, sqlite3.Error, PersistenceError, SQLAlchemyError) as e:
        reason = str(getattr(e, "orig", None) or e).splitlines()[0]
        if "readonly" in reason or "ermission denied" in reason or "Read-only" in reason:
            reason += " (hookledger writes to its data directory even to read or verify: "
            reason += "inspect a read-only copy by copying it somewhere writable)"
        raise click.ClickException(f"cannot open {where}: {reason}") from e


def dump(value: Any) -> None:
    """Print ``value`` as indented JSON (UTF-8, keys in insertion order)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))
