"""``hookledger sql`` and ``hookledger analytics``: SQL over the DuckDB analytics model.

Both catch the analytics model up with the ledger first, then read the published
snapshot through a read-only connection (docs/analytics.md): a statement that writes
fails with DuckDB's read-only error and changes nothing.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import click

from api.cli_context import dump, services


def _reader(ctx: click.Context) -> Any:
    from projections.analytics import catch_up, open_snapshot

    s = services(ctx)
    catch_up(s.ledger, s.settings.data_dir)
    con = open_snapshot(s.settings.data_dir)
    ctx.call_on_close(con.close)
    return con


@click.command("sql")
@click.argument("query")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
    show_default=True, help="json: one array of row objects; parquet needs --output.",
)
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Write to FILE instead of standard output (required for parquet).",
)
@click.pass_context
def sql(ctx: click.Context, query: str, fmt: str, output: Path | None) -> None:
    """Run one read-only SQL statement on the analytics model (DuckDB dialect).

    Tables: events, usage, tool_calls, prompt_batches, sessions, model_prices.
    """
    import duckdb

    from projections.analytics.queries import json_value

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    if output is not None and not output.parent.is_dir():
        raise click.ClickException(f"cannot write {output}: no directory {output.parent}")
    con = _reader(ctx)
    try:
        # the model only: no files read or written by the query (read_csv, COPY … TO),
        # and a query cannot turn that back on
        con.execute("SET enable_external_access = false")
        found = len(con.extract_statements(query))
        if found != 1:  # DuckDB would run them all and show the last one's rows
            raise click.ClickException(
                "QUERY holds no SQL statement" if not found
                else f"QUERY holds {found} statements: run one at a time"
            )
        if fmt == "parquet":
            import pyarrow.parquet as pq

            relation = con.sql(query)
            if relation is None:  # SET, PRAGMA, …: nothing to write
                raise click.ClickException(
                    "--format parquet needs a statement that returns rows (e.g. SELECT)"
                )
            try:
                pq.write_table(relation.fetch_arrow_table(), str(output))
            except OSError as e:
                raise click.ClickException(f"cannot write {output}: {e}") from None
            click.echo(f"wrote {output}", err=True)
            return
        cur = con.execute(query)
        columns = [d[0] for d in cur.description] if cur.description else []
        rows = cur.fetchall() if columns else []
    except duckdb.Error as e:
        raise click.ClickException(str(e)) from None
    try:
        out = output.open("w", encoding="utf-8", newline="") if output else None
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e.strerror}") from None
    try:
        if fmt == "json":
            data = [dict(zip(columns, map(json_value, r), strict=True)) for r in rows]
            # strict JSON: json_value maps NaN and infinities to null
            text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
            click.echo(text, file=out)
        elif fmt == "csv":
            w = csv.writer(out or sys.stdout)
            w.writerow(columns)
            w.writerows([[_csv_cell(v) for v in r] for r in rows])
        else:
            text = _table(columns, rows)
            click.echo(text, file=out)
    finally:
        if out:
            out.close()


def _csv_cell(value: Any) -> Any:
    """A CSV cell: booleans ``true``/``false``, lists and structs as JSON, NULL empty."""
    from projections.analytics.queries import json_value

    value = json_value(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    return value


def _table(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    from projections.analytics.queries import json_value

    cells = [[("" if v is None else str(json_value(v))) for v in r] for r in rows]
    widths = [max([len(c), *(min(len(r[i]), 60) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(v[:60].ljust(w) for v, w in zip(r, widths, strict=True)))
    lines.append(f"({len(rows)} rows)")
    return "\n".join(lines)


@click.command("analytics")
@click.argument("query", required=False)
@click.option("--since", default=None, help="Only rows from this UTC date/time on (ISO-8601).")
@click.option("--limit", type=int, default=None, help="Rows (default per query; max 10000).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
@click.option("--rebuild", is_flag=True, help="Delete the analytics model and replay the log.")
@click.pass_context
def analytics(
    ctx: click.Context, query: str | None, since: str | None, limit: int | None,
    as_json: bool, rebuild: bool,
) -> None:
    """Run a named analytics query (no QUERY: list them)."""
    from projections.analytics import named_queries, run_query
    from projections.analytics import rebuild as rebuild_model

    if rebuild:
        s = services(ctx)
        applied = rebuild_model(s.ledger, s.settings.data_dir)
        click.echo(f"rebuilt analytics: {applied} events", err=True)
    if query is None and (since is not None or limit is not None or as_json):
        raise click.UsageError("--since, --limit and --json apply to a QUERY: name one")
    if query is None:
        if not rebuild:
            for name, description in named_queries().items():
                click.echo(f"{name:<18} {description}")
        return
    if query not in named_queries():
        raise click.BadParameter(
            f"unknown query {query!r}; known: {', '.join(named_queries())}", param_hint="QUERY"
        )
    con = _reader(ctx)
    try:
        rows = run_query(con, query, since=since, limit=limit)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if as_json:
        dump(rows)
        return
    columns = list(rows[0]) if rows else []
    click.echo(_table(columns, [tuple(r.values()) for r in rows]))
