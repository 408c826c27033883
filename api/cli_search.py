"""``hookledger search QUERY``: full-text search over prompts, tool inputs, summaries
and observations (:mod:`projections.search_query`)."""

from __future__ import annotations

import click

from api.cli_context import dump, services


@click.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--kind", "kinds", multiple=True,
              type=click.Choice(["prompt", "tool_input", "summary", "observation"]),
              help="Only these kinds of documents (repeatable).")
@click.option("--session", "session_ref", help="Only this session (id, the agent's id or a prefix).")
@click.option("--project", "cwd", help="Only sessions whose working directory is this path.")
@click.option("--any", "any_term", is_flag=True, help="Match any word (default: every word).")
@click.option("--recent", is_flag=True, help="Newest matches first (default: best first).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 500), help="Hits.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: query and hits.")
@click.pass_context
def search_cmd(ctx: click.Context, query: tuple[str, ...], kinds: tuple[str, ...], session_ref: str | None,
               cwd: str | None, any_term: bool, recent: bool, limit: int, as_json: bool) -> None:
    """Search the ledger: the words of QUERY (stemmed; punctuation ignored), best and
    most recent first. Exit 1 when the query has no words or the session is unknown."""
    from projections import queries
    from projections.search_query import SearchQueryError, search_models

    s = services(ctx)
    s.runner.catch_up()
    text = " ".join(query)
    sid = None
    if session_ref:
        sid = queries.find_session_id(s.models, session_ref)
        if sid is None:
            raise click.ClickException(queries.unresolved(s.models, session_ref))
    try:
        hits = search_models(s.models, text, limit=limit, kinds=kinds or None, session_id=sid, cwd=cwd,
                             any_term=any_term, order="recent" if recent else "best")
    except SearchQueryError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        dump({"query": text, "hits": [h.as_dict() for h in hits]})
        return
    if not hits:
        click.echo("no matches")
    for h in hits:
        click.echo(f"{h.occurred_at or '?'}  {h.agent or '?'}  {h.session_id[:8]}  batch {h.batch}  "
                   f"{h.kind}  {h.title}")
        click.echo(f"    {h.snippet}")
