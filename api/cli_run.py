"""``hookledger run -- CMD ARGS…``: run an agent and record its stream live (click command).

The process logic lives in :mod:`ledger.agent_runner`; this module only parses the
command line, builds the services and exits with the agent's exit status.
"""

from __future__ import annotations

import os
import sys

import click

RUN_AGGREGATE_CACHE = 16
"""Aggregates kept in memory by ``hookledger run`` (see docs/benchmarks.md: 2.3 ms a line
with the cache, 17 ms and growing without)."""


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--session",
    default=None,
    help="Record under this external session id (a follow-up prompt continues that session).",
)
@click.option(
    "--prompt",
    default=None,
    help="The prompt text to record (default: read from the claude/codex command line).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run_cmd(
    ctx: click.Context, session: str | None, prompt: str | None, command: tuple[str, ...]
) -> None:
    """Run an agent (claude -p … --output-format stream-json --verbose, or codex exec --json …),
    pass its output through and record it in the ledger as it arrives; exit with its status."""
    from api.cli_context import build_services
    from ledger.agent_runner import run_agent

    # A run appends to one session line after line: keep its aggregate cached (fast-forwarded
    # when another writer appended), instead of replaying the stream for every line.
    services = build_services(ctx.ensure_object(dict)["settings"], cache_size=RUN_AGGREGATE_CACHE)
    ctx.call_on_close(services.close)
    try:
        outcome = run_agent(
            services.ledger, list(command), session=session, prompt=prompt, out=sys.stdout.buffer
        )
    except OSError as e:
        raise click.ClickException(f"cannot run {command[0]!r}: {e}") from e
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # ``| head`` went away: no "Exception ignored" at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    where = outcome.session.external_id if outcome.session else "-"
    click.echo(
        f"hookledger: {outcome.outcome} ({outcome.reason or 'ok'}); session {where}; "
        f"{outcome.recorded.appended} events appended, {outcome.recorded.rejected} lines rejected",
        err=True,
    )
    ctx.exit(outcome.exit_status)
