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
    """:func:`api.bootstrap.build` with a refused configuration (``ValueError``) turned
    into a :class:`click.ClickException` carrying its reason."""
    from api.bootstrap import build

    try:
        return build(settings, **kwargs)
    except ValueError as e:
        raise click.ClickException(str(e)) from e


def dump(value: Any) -> None:
    """Print ``value`` as indented JSON (UTF-8, keys in insertion order)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))
