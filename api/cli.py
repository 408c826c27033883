"""The ``hookledger`` command line (click). The composition root for CLI processes.

Commands that read (``sessions``, ``show``, ``stats``) first catch the projections up
with everything already in the log, so they answer with all of it applied.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from api.cli_context import build_services
from api.cli_context import dump as _dump
from api.cli_context import services as _services
from ledger.config import Settings


@click.group()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),  # checked when the stores open: `hook` must exit 0
    default=None,
    help="Data directory (env HOOKLEDGER_DATA_DIR; default: the platform user data dir).",
)
@click.pass_context
def main(ctx: click.Context, data_dir: Path | None) -> None:
    """hookledger: an event-sourced, verifiable ledger of AI coding-agent sessions."""
    ctx.ensure_object(dict)["settings"] = Settings.from_env(data_dir)


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that parse files while this one records, in the same order "
    "(0: parse here; default: 1 for 8 MiB of input to read or more on two CPUs or more, "
    "else 0).",
)
@click.option(
    "--reread", is_flag=True,
    help="Read every file, also those recorded whole by an earlier import and unchanged "
    "since (skipped unread by default); those read whole are remembered again.",
)
@click.option(
    "--no-jobs", is_flag=True,
    help="Do not run the liveness jobs after the import (by default they run once, as "
    "`jobs run --once` does: sessions idle past the timeouts are settled).",
)
@click.pass_context
def import_cmd(
    ctx: click.Context, paths: tuple[Path, ...], as_json: bool, workers: int | None,
    reread: bool, no_jobs: bool,
) -> None:
    """Import agent transcripts (files or directories, recursively).

    A path that does not exist, or is neither a file nor a directory, is reported as
    skipped and the others are imported (``import ~/.claude/projects ~/.codex/sessions``
    works for a user of one agent); none usable is a usage error.

    A file recorded whole by an earlier import into this store and unchanged since
    (same size, modification time and inode, same hookledger code) is not read again;
    the data directory's ``imported-files.db`` remembers them (a cache: deleting it, or
    ``--reread``, reads everything).

    Then the liveness jobs run once (``--no-jobs``: not), as the server runs them every
    minute: history is mostly idle, so its batches are closed, its sessions timed out
    (COMPLETED) and those ended 30 days ago archived, with the evidence, as if a server
    had been running; ``--json`` gives their report under ``jobs``."""
    from api.jobs import run_jobs
    from ledger.imported_files import FILE_NAME, ImportedFiles
    from ledger.importer import discover, import_paths

    unusable = {p: _unusable(p) for p in paths}
    missing = [(p, why) for p, why in unusable.items() if why]
    if len(missing) == len(unusable):
        raise click.BadParameter(
            "; ".join(f"{p}: {why}" for p, why in missing), param_hint="PATHS"
        )
    services = _services(ctx)
    try:
        files = discover([p for p, why in unusable.items() if not why])
    except FileNotFoundError as e:  # gone since it was checked
        raise click.ClickException(str(e)) from e
    settings = ctx.obj["settings"]
    with (
        ImportedFiles(settings.data_dir / FILE_NAME, services.ledger, settings.store_identity()) as imported,
        click.progressbar(length=len(files), label="importing", file=sys.stderr) as bar,
    ):
        summary = import_paths(
            services.ledger, files, progress=lambda _p: bar.update(1), workers=workers,
            imported=imported, reread=reread,
        )
    jobs = None if no_jobs else run_jobs(services).as_dict()  # catches the projections up
    if jobs is None:
        services.runner.catch_up()
    summary.skipped[:0] = [(str(p), why) for p, why in missing]
    data = summary.as_dict()
    if as_json:
        _dump({**data, "jobs": jobs})
        return
    n_unchanged = data["files_unchanged"]
    unchanged = f" ({n_unchanged} more unchanged since their last import: not read)" if n_unchanged else ""
    click.echo(
        f"{data['files']} files{unchanged}: {data['sessions_added']} sessions added "
        f"({data['sessions_touched']} touched), {data['events_appended']} events appended, "
        f"{data['duplicates_skipped']} duplicates skipped, {data['rejected']} lines rejected"
        + (f" (parsed by {data['parse_processes']} process(es))" if data["parse_processes"] > 1 else "")
    )
    if jobs and jobs["decisions"]:
        decided = ", ".join(f"{k}={v}" for k, v in jobs["decisions"].items())  # type: ignore[union-attr]
        click.echo(f"liveness jobs: {decided} (idle sessions settled; --no-jobs leaves them)")
    for skipped in data["files_skipped"]:  # type: ignore[union-attr]
        click.echo(f"skipped {skipped['path']}: {skipped['reason']}", err=True)
    for left in data["unfinished_lines_left"]:  # type: ignore[union-attr]
        click.echo(
            f"left for the next import: the last line of {left['path']} ({left['bytes']} "
            "bytes), still being written", err=True,
        )


def _unusable(path: Path) -> str | None:
    """Why ``import`` cannot read ``path`` (None: a file or a directory)."""
    if not path.exists():
        return "no such file or directory"
    if not (path.is_file() or path.is_dir()):
        return "not a file or directory"
    return None


@main.command()
@click.option("--json", "as_json", is_flag=True, help="A JSON array, one object per session.")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=None,
    help="At most this many sessions (default: all).",
)
@click.option("--agent", default=None, help="Only this agent: claude-code, codex, gemini, cursor or openclaw.")
@click.option("--status", default=None, help="Only this status, e.g. ACTIVE or COMPLETED (any case).")
@click.pass_context
def sessions(ctx: click.Context, as_json: bool, limit: int | None, agent: str | None, status: str | None) -> None:
    """List sessions, most recent activity first."""
    from ledger.ingest import HOOK_PARSERS
    from ledger.lifecycle import SessionStatus
    from projections import queries

    if agent is not None and agent not in HOOK_PARSERS:  # "claude" listed nothing, silently
        known = ", ".join(sorted(HOOK_PARSERS))
        raise click.BadParameter(f"unknown agent {agent!r} (known: {known})", param_hint="--agent")
    if status is not None and status.upper() not in SessionStatus.__members__:  # "COMPLETE" too
        known = ", ".join(SessionStatus.__members__)
        raise click.BadParameter(f"unknown status {status!r} (known: {known})", param_hint="--status")
    services = _services(ctx)
    services.runner.catch_up()
    rows = queries.list_sessions(services.models, limit=limit, agent=agent, status=status)
    if as_json:
        _dump(rows)
        return
    for r in rows:
        click.echo(
            f"{r['id'][:8]}  {r['agent']:<11} {r['status']:<10} prompts={r['prompt_count']:<3} "
            f"tools={r['tool_call_count']:<4} in={r['input_tokens']} out={r['output_tokens']} "
            f"{_cost_text(r)} last={r['last_activity_at']}  {r['external_id']}"
        )


def _cost_text(r: dict[str, Any]) -> str:
    """``cost=$1.2345`` (computed), ``+N unpriced tokens``, ``agent=$1.20`` (reported)."""
    text = f"cost=${r['cost_usd']:.4f}"
    if r["unpriced_tokens"]:
        text = f"cost>=${r['cost_usd']:.4f} unpriced_tokens={r['unpriced_tokens']}"
    if r["agent_cost_usd"] is not None:
        text += f" agent=${r['agent_cost_usd']:.4f}"
    return text


@main.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="The session with its batches, tool calls, status history and summaries, as JSON.")
@click.pass_context
def show(ctx: click.Context, session: str, as_json: bool) -> None:
    """Show one session (ledger id, agent's session id, or id prefix)."""
    from projections import queries

    services = _services(ctx)
    services.runner.catch_up()
    sid = queries.find_session_id(services.models, session)
    found = queries.get_session(services.models, sid) if sid else None
    if found is None:
        raise click.ClickException(queries.unresolved(services.models, session))
    if as_json:
        _dump(found)
        return
    click.echo(f"{found['id']}  {found['agent']}  {found['status']}  {found['external_id']}")
    in_batches = {b["batch"] for b in found["batches"]}
    for b in found["batches"]:
        click.echo(
            f"  batch {b['batch']} [{b['status']}] {b['started_at']} {_cost_text(b)}: "
            f"{(b['prompt'] or '')[:100]!r}"
        )
        _echo_activity(found, {b["batch"]})
    outside = {x["batch"] for x in (*found["tool_calls"], *found["inputs"])} - in_batches
    if outside:  # before the first prompt (batch 0), e.g. a run started without one
        click.echo("  outside any prompt batch:")
        _echo_activity(found, outside)


def _echo_activity(found: dict[str, Any], batches: set[int]) -> None:
    """The tool calls and the inputs that open no batch (local slash commands, task
    notifications) of ``batches``, in log order."""
    items: list[tuple[int, str]] = []
    for c in found["tool_calls"]:
        if c["batch"] in batches:
            mark = "!" if c["is_error"] else " "
            at = c["start_position"] or c["end_position"] or 0
            items.append((at, f"    {mark} {c['tool_name']:<16} {c['duration_ms'] or '-':>8} ms  {c['status']}"))
    for i in found["inputs"]:
        if i["batch"] in batches:
            items.append((i["position"], f"    > {i['kind']}: {(i['text'] or '')[:100]!r}"))
    for _, line in sorted(items, key=lambda item: item[0]):
        click.echo(line)


def _rejected_inputs(services: Any, streams: list[str]) -> list[dict[str, str]]:
    """``{source, location, reason}`` of every input kept as rejected, stream by stream."""
    from uuid import UUID

    from ledger.quarantine import Quarantine

    return [
        {"source": e.source, "location": e.location, "reason": e.reason}
        for stream in streams
        for e in services.ledger.events.get(UUID(stream))
        if isinstance(e, Quarantine.InputRejected)
    ]


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts: events, sessions, rejected inputs, prompts, tool calls; with --json also
    each rejected input's source, location and reason (rejected_inputs)."""
    from projections import queries

    services = _services(ctx)
    services.runner.catch_up()
    data = queries.stats(services.models)
    if as_json:
        _dump({**data, "rejected_inputs": _rejected_inputs(services, queries.rejected_streams(services.models))})
    else:
        click.echo("  ".join(f"{k}={v}" for k, v in data.items()))


@main.command()
@click.argument("path", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--against-store", is_flag=True, help="With PATH: also compare it with the store.")
@click.option(
    "--anchors", "anchors_dir", metavar="DATA_DIR",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="With PATH: also check its manifest against the export anchor file this data "
    "directory's store wrote when the export was taken (heads, link head).",
)
@click.pass_context
def verify(
    ctx: click.Context, path: Path | None, against_store: bool, anchors_dir: Path | None
) -> None:
    """Recompute every hash chain; exit 1 naming the session and position on a problem.

    With PATH (an export directory): verify the export on its own, no store needed."""
    from api.cli_export import locate, store_anchors, verify_export_cmd
    from ledger.verify import verify_store

    if path is None and anchors_dir is not None:
        ctx.fail("--anchors DATA_DIR checks an export: give its directory as PATH (the "
                 "store's own verify reads the anchors of --data-dir)")
    if path is not None:
        if not path.is_dir():
            ctx.fail(
                f"{path} is a file: PATH is an export directory (JSONL or Parquet, with its "
                "manifest.json). An OTLP export carries no hash chain and cannot be "
                "verified; verify a JSONL or Parquet export of the same sessions instead."
            )
        verify_export_cmd(ctx, path, against_store, anchors_dir)
        return
    settings = ctx.obj["settings"]
    store = settings.sqlite_path
    if not settings.is_postgres and not store.exists():  # a mistyped --data-dir
        raise click.ClickException(
            f"no event store at {store}: nothing to verify (check --data-dir or "
            "HOOKLEDGER_DATA_DIR)"
        )
    services = _services(ctx)
    # read before the log: a healthy projection never gets ahead of the log's head
    read_up_to = {s.name: s.position for s in services.runner.status()}
    # event_index + the heads and link chains of earlier exports
    anchors, links = store_anchors(services)
    report = verify_store(services.ledger.recorder, services.ledger.mapper, anchors, links)
    locate(services, report.problems)
    head = services.ledger.max_position()
    past = {name: position for name, position in read_up_to.items() if position > head}
    ahead = [  # e.g. a cut tail whose event_index rows (the anchors) were deleted with it
        f"the read models ({', '.join(past)}) have read the log up to position "
        f"{max(past.values())}, but the log ends at {head}: events were deleted from "
        "the log's tail (or these read models are another store's)"
    ] if past else []
    if report.ok and not ahead:
        click.echo(f"ok: {report.events} events in {report.streams} streams, {report.anchors} anchors checked")
        if report.events and not report.anchors:
            click.echo(
                "warning: nothing anchors this log (the event_index read model is empty and "
                "no export anchors exist): the chains hold, but a cut tail or a deleted "
                "stream cannot be seen. Reading (e.g. `hookledger stats`) projects the log "
                "again; `hookledger export` records its heads.",
                err=True,
            )
        return
    for problem in [*report.problems, *ahead]:
        click.echo(f"FAIL {problem}", err=True)
    ctx.exit(1)


@main.group()
def projections() -> None:
    """Projection positions, lag and rebuilds."""


@projections.command("status")
@click.option("--json", "as_json", is_flag=True, help="A JSON array: name, position, head, lag.")
@click.pass_context
def projections_status(ctx: click.Context, as_json: bool) -> None:
    """Each projection's log position, the log's head and the lag between them (events)."""
    services = _services(ctx)
    rows = [{"name": s.name, "position": s.position, "head": s.head, "lag": s.lag} for s in services.runner.status()]
    if as_json:
        _dump(rows)
        return
    for r in rows:
        click.echo(f"{r['name']:<16} position={r['position']:<10} head={r['head']:<10} lag={r['lag']}")


@projections.command("rebuild")
@click.argument("names", nargs=-1)
@click.pass_context
def projections_rebuild(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Rebuild projections (default: all) from position 0 into fresh tables, in one pass
    over the log, then swap them in."""
    from projections.runner import PROJECTION_CLASSES

    for n in names:
        if n not in PROJECTION_CLASSES:
            known = ", ".join(PROJECTION_CLASSES)
            raise click.BadParameter(f"unknown projection {n!r}; known: {known}")
    from projections.runner import AnchorsLost, SwapBusy

    chosen = tuple(dict.fromkeys(names)) or tuple(PROJECTION_CLASSES)
    try:
        applied = _services(ctx).runner.rebuild(*chosen)
    except (AnchorsLost, SwapBusy) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"rebuilt {', '.join(chosen)}: {applied} events applied")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=int, help="TCP port.")
@click.option("--projections", "projections_in", type=click.Choice(["process", "thread"]),
              default="process", show_default=True,
              help="Where the projections run: a child process (both cores: ingest is not "
                   "slowed by them) or a thread of the server process.")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, projections_in: str) -> None:
    """Run the HTTP service (single writer of the store).

    Binds 127.0.0.1 by default; any other address needs HOOKLEDGER_TOKEN, which every
    request then has to carry (see api/access.py)."""
    import os

    import uvicorn

    from api.access import TOKEN_ENV, bind_error
    from api.app import create_app

    token = os.environ.get(TOKEN_ENV) or None
    refusal = bind_error(host, token)
    if refusal:
        raise click.ClickException(refusal)
    settings = ctx.obj["settings"]
    services = build_services(settings, cache_size=1024)
    click.echo(f"hookledger serving {settings.data_dir} on http://{host}:{port}", err=True)
    try:
        app = create_app(services, token=token, projection_process=projections_in == "process")
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        services.close()


@main.command()
@click.argument("agent")
@click.pass_context
def hook(ctx: click.Context, agent: str) -> None:
    """Read one hook payload on stdin and send it to the server (always exits 0)."""
    from api.hook_client import run

    settings = ctx.obj["settings"]
    try:
        run(agent, str(settings.data_dir))
    except Exception:
        click.echo("{}")
    ctx.exit(0)


from api.cli_export import export_cmd

main.add_command(export_cmd)
from api.cli_jobs import jobs as _jobs

main.add_command(_jobs)
from api.cli_commands import session as _session

main.add_command(_session)
from api.cli_run import run_cmd

main.add_command(run_cmd)
from api.cli_hooks import doctor, forward_spool_cmd, install_hooks, uninstall_hooks

main.add_command(install_hooks)
main.add_command(uninstall_hooks)
main.add_command(doctor)
main.add_command(forward_spool_cmd)
from api.cli_analytics import analytics as _analytics
from api.cli_analytics import sql as _sql

main.add_command(_sql)
main.add_command(_analytics)
from api.cli_summaries import summaries as _summaries

main.add_command(_summaries)
from api.cli_search import search_cmd

main.add_command(search_cmd)

if __name__ == "__main__":
    main()
