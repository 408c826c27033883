"""``hookledger summaries run --once`` and ``hookledger summaries show SESSION``."""

from __future__ import annotations

import click

from api.cli_context import dump, services


@click.group()
def summaries() -> None:
    """Summaries and observations of closed prompt batches and ended sessions."""


@summaries.command("run")
@click.option("--once", is_flag=True, required=True, help="Summarise what is pending once and exit.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: written (by summariser), fallbacks (by reason), tokens, appended.")
@click.pass_context
def summaries_run(ctx: click.Context, once: bool, as_json: bool) -> None:
    """Summarise every completed batch and ended session that has no summary yet (the
    LLM summariser first when HOOKLEDGER_LLM_BASE_URL is set and its budget allows)."""
    from api.summaries import run_summaries

    report = run_summaries(services(ctx)).as_dict()
    if as_json:
        dump(report)
        return
    written = ", ".join(f"{k}={v}" for k, v in report["written"].items()) or "nothing pending"
    fallbacks = ", ".join(f"{k}={v}" for k, v in report["fallbacks"].items())
    tokens = f"; tokens={report['tokens']}" if report["tokens"] else ""
    click.echo(f"summaries: {written}" + (f"; fallbacks: {fallbacks}" if fallbacks else "") + tokens)


@summaries.command("show")
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: session_id and its summaries, with their observations.")
@click.pass_context
def summaries_show(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Print a session's summaries (REF: session id, the agent's id or a prefix)."""
    from projections import queries

    s = services(ctx)
    s.runner.catch_up()
    sid = queries.find_session_id(s.models, ref)
    if sid is None:
        raise click.ClickException(queries.unresolved(s.models, ref))
    found = queries.session_summaries(s.models, sid)
    if as_json:
        dump({"session_id": sid, "summaries": found})
        return
    if not found:
        click.echo(f"no summaries yet for session {sid}")
        return
    for item in found:
        where = "session" if item["scope"] == "session" else f"batch {item['batch']}"
        click.echo(f"## {where} ({item['summariser']}{', ' + item['fallback_reason'] if item['fallback_reason'] else ''})")
        click.echo(f"request: {item['request'] or '-'}")
        for name in ("investigated", "learned", "completed", "next_steps", "files_edited", "commands_failed"):
            for line in item[name]:
                click.echo(f"  {name}: {line}")
        for o in item["observations"]:
            click.echo(f"  [{o['kind']}] {o['title']}")
