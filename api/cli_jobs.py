"""``hookledger jobs run --once [--now ISO]``: the liveness jobs, for cron and tests."""

from __future__ import annotations

import click

from api.cli_context import dump, services


@click.group()
def jobs() -> None:
    """Liveness jobs: close idle batches, time out idle sessions, archive old ones."""


@jobs.command("run")
@click.option("--once", is_flag=True, required=True, help="Run every rule once and exit.")
@click.option(
    "--now", "now_text", default=None, help="ISO-8601 time to measure idle time to (default: now)."
)
@click.option(
    "--archive-after-days", type=int, default=None, help="Override the archive threshold."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: now, examined, decisions, appended, sessions.")
@click.pass_context
def jobs_run(
    ctx: click.Context,
    once: bool,
    now_text: str | None,
    archive_after_days: int | None,
    as_json: bool,
) -> None:
    """Run the liveness rules on every candidate session once; print what was decided."""
    from datetime import UTC, datetime

    from api.jobs import run_jobs
    from ledger.jobs import JobConfig

    now = None
    if now_text:
        try:
            now = datetime.fromisoformat(now_text.replace("Z", "+00:00"))
        except ValueError as e:
            raise click.BadParameter(f"not an ISO-8601 time: {now_text!r}") from e
        now = now if now.tzinfo else now.replace(tzinfo=UTC)
    s = services(ctx)
    days = archive_after_days if archive_after_days is not None else s.settings.archive_after_days
    report = run_jobs(s, now, JobConfig(archive_after_days=days)).as_dict()
    if as_json:
        dump(report)
        return
    decided = ", ".join(f"{k}={v}" for k, v in report["decisions"].items()) or "nothing to do"
    click.echo(f"jobs at {report['now']}: {report['examined']} sessions examined; {decided}")
