"""``hookledger session pause|resume|terminate|archive|fork ID``: operator commands.

An invalid transition exits 1 with a message naming the session's state and the
allowed transitions; nothing is appended.
"""

from __future__ import annotations

import getpass

import click

from api.cli_context import dump, services


@click.group("session")
def session() -> None:
    """Operator commands on one session (ledger id, agent's session id, or id prefix)."""


def _command(name: str, help_text: str) -> None:
    @session.command(name, help=help_text)
    @click.argument("session_ref", metavar="ID")
    @click.option("--reason", default=None, help="Why (recorded with the command).")
    @click.option("--by", default=None, help="Who asks (default: the OS user).")
    @click.option("--key", default=None, help="Idempotency key (a retry appends nothing).")
    @click.option(
        "--at",
        "at_position",
        type=int,
        default=None,
        help="The parent's log position to fork at (default: its head).",
        hidden=name != "fork",  # accepted everywhere, refused with a message but on fork
    )
    @click.option("--json", "as_json", is_flag=True, help="One JSON object: the command's result.")
    @click.pass_context
    def run(
        ctx: click.Context,
        session_ref: str,
        reason: str | None,
        by: str | None,
        key: str | None,
        at_position: int | None,
        as_json: bool,
    ) -> None:
        from api.commands import execute
        from ledger.commands import InvalidTransition, UnknownCommand

        if at_position is not None and name != "fork":
            raise click.UsageError("--at applies to fork only")
        try:
            out = execute(
                services(ctx),
                session_ref,
                name,
                by=by or getpass.getuser(),
                reason=reason,
                key=key,
                at_position=at_position,
            )
        except (LookupError, InvalidTransition, UnknownCommand, ValueError) as e:
            raise click.ClickException(str(e).strip("'\"")) from e
        if as_json:
            dump(out)
            return
        line = f"{out['command']}: {out['session_id']} {out['from_status']} -> {out['to_status']}"
        if "fork_id" in out:
            line += f"; fork {out['fork_id']}"
        click.echo(line + ("" if out["appended"] else " (already applied)"))


for _name, _help in [
    ("pause", "Pause a live session."),
    ("resume", "Resume a paused session."),
    ("terminate", "Terminate a live or paused session."),
    ("archive", "Archive an ended session."),
    ("fork", "Fork a session: a new, paused session with the parent's history up to --at."),
]:
    _command(_name, _help)
