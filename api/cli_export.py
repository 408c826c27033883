"""``hookledger export`` and the export half of ``hookledger verify`` (see docs/exports.md)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from api.cli_context import dump as _dump
from api.cli_context import services as _services

MAX_SHOWN = 20
"""FAIL lines printed by ``verify PATH`` (the first ones name the cause; the rest follow)."""


@click.command("export")
@click.option(
    "--format", "fmt", required=True, type=click.Choice(["jsonl", "parquet", "otlp"]),
    help="jsonl/parquet: verifiable event export (a directory); otlp: OTLP JSON traces (a file).",
)
@click.option("--session", "sessions", multiple=True,
              help="Only this session (ledger id, agent's session id or unique prefix); "
              "repeatable.")
@click.option("--since", default=None,
              help="ISO-8601 time (UTC if no offset): events recorded from then on.")
@click.option("--output", required=True, type=click.Path(path_type=Path),
              help="New (or empty) directory for jsonl/parquet; file for otlp.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest (or a summary) as JSON.")
@click.pass_context
def export_cmd(
    ctx: click.Context, fmt: str, sessions: tuple[str, ...], since: str | None, output: Path,
    as_json: bool,
) -> None:
    """Export events (jsonl, parquet: with positions, digests, manifest) or OTLP traces."""
    from ledger.exports.records import ExportError, Filters, parse_time

    services = _services(ctx)
    try:
        since_dt = parse_time(since) if since else None
    except ValueError as e:
        raise click.BadParameter(f"not an ISO-8601 time: {since!r}", param_hint="--since") from e
    ids = _resolve_sessions(services, sessions)
    if fmt == "otlp":
        _export_otlp(services, ids, since_dt, output, as_json)
        return
    from ledger.exports.anchors import save_anchors
    from ledger.exports.writer import export
    from ledger.store_id import store_id

    try:
        manifest = export(services.ledger.recorder, services.ledger.mapper, output, fmt,
                          Filters(tuple(ids), since_dt))
    except (ValueError, ExportError) as e:
        raise click.ClickException(str(e)) from e
    save_anchors(services.settings.data_dir, manifest, output.resolve(),
                 store_id(services.ledger.recorder), services.settings.store_identity())
    if as_json:
        _dump(manifest)
        return
    click.echo(
        f"exported {manifest['total']} events of {manifest['stream_count']} streams "
        f"(positions {manifest['first_position']}..{manifest['last_position']}, store head "
        f"{manifest['store_head_position']}{', partial' if manifest['partial'] else ''}) "
        f"to {output}"
    )


def _resolve_sessions(services: Any, refs: tuple[str, ...]) -> list[str]:
    if not refs:
        return []
    from projections import queries

    services.runner.catch_up()
    ids = []
    for ref in refs:
        found = queries.find_session_id(services.models, ref)
        if found is None:
            raise click.BadParameter(
                queries.unresolved(services.models, ref), param_hint="--session"
            )
        ids.append(found)
    return ids


def _export_otlp(services: Any, ids: list[str], since: Any, output: Path, as_json: bool) -> None:
    import json

    from projections.otlp import build_request

    services.runner.catch_up()
    request = build_request(services.models, sessions=ids, since=since)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(request, ensure_ascii=False) + "\n", encoding="utf-8")
    spans = [s for r in request["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]]
    traces = len({s["traceId"] for s in spans})
    if as_json:
        _dump({"output": str(output), "traces": traces, "spans": len(spans)})
    else:
        click.echo(f"exported {traces} traces ({len(spans)} spans) as OTLP JSON to {output}")


def verify_export_cmd(
    ctx: click.Context, path: Path, against_store: bool, anchors_dir: Path | None = None
) -> None:
    """``hookledger verify PATH [--against-store] [--anchors DATA_DIR]``: exit 1 naming
    the first bad record."""
    from ledger.exports.anchors import check_export
    from ledger.exports.check import compare_with_store, verify_export

    report = verify_export(path)
    problems = list(report.problems)
    matched = ""
    if not problems and anchors_dir is not None:
        anchor, problems = check_export(path, report.manifest, anchors_dir)
        matched = f"; matches export anchor file {anchor}"
    if not problems and against_store:
        services = _services(ctx)
        problems = compare_with_store(path, services.ledger.recorder, services.ledger.mapper)
        m = report.manifest
        matched += (f"; matches the store exactly up to position {m['store_head_position']} "
                   f"({len(m['streams'])} stream heads)")
    if problems:
        for problem in problems[:MAX_SHOWN]:
            click.echo(f"FAIL {problem}", err=True)
        if len(problems) > MAX_SHOWN:
            click.echo(f"… and {len(problems) - MAX_SHOWN} more problems", err=True)
        ctx.exit(1)
    kind = "partial" if report.manifest["partial"] else "whole"
    click.echo(f"ok: {report.records} records in {report.streams} streams ({kind} export), "
               f"chains, counts, heads and sha256 match the manifest{matched}")


def store_anchors(services: Any) -> tuple[Iterator[Any], list[Any]]:
    """``event_index`` anchors merged with the export anchors of the data directory that
    are this store's (by its id, :mod:`ledger.store_id`), in position order, without
    duplicates, and those files' link chain heads (:class:`ledger.verify.LinkAnchor`);
    notes on stderr how many anchor files belong to other stores. Raises
    click.ClickException for a bad anchor file."""
    from ledger.exports.anchors import load_anchors
    from ledger.store_id import read_store_id

    try:
        loaded = load_anchors(services.settings.data_dir,
                              read_store_id(services.ledger.recorder),
                              services.settings.store_identity())
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    if loaded.other_stores:
        files = sum(loaded.other_stores.values())
        click.echo(
            f"note: {files} export anchor file{'s' if files > 1 else ''} of other stores "
            f"({', '.join(loaded.other_stores)}) not checked: they name another store id "
            "than this store's",
            err=True,
        )
    merged = _unique(heapq.merge(services.anchors(), loaded.anchors, key=lambda a: a.position))
    return merged, loaded.links


def locate(services: Any, problems: list[Any]) -> None:
    """Name, in each of ``problems`` about the log's order (a link chain ending
    elsewhere), the first position where the store differs, from the export the anchor
    was written for when it is still where it was written (unchanged)."""
    from ledger.exports.check import first_difference

    for problem in problems:
        if problem.link is None or problem.position is not None:
            continue
        found = first_difference(problem.link, services.ledger.recorder, services.ledger.mapper)
        if found is None or found.position is None:
            continue
        problem.position, problem.stream_id, problem.version = (
            found.position, found.stream_id or "", found.version
        )
        problem.message += (f"; the first difference: {problem.link.export} row {found.row}: "
                            f"{found.message}")


def _unique(anchors: Iterable[Any]) -> Iterator[Any]:
    position, seen = None, set()
    for a in anchors:
        if a.position != position:
            position, seen = a.position, set()
        if a not in seen:
            seen.add(a)
            yield a
