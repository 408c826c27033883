"""Full-text search (issue 6 item 5): prompts and tool inputs of a real transcript found
by their own words (read independently with plain json), summaries and observations,
replacement and rebuild keeping the index in step, hostile queries, the API, the CLI,
the context digest and a live server; on SQLite (FTS5) and PostgreSQL (tsvector)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select, text
from starlette.testclient import TestClient

from api.app import create_app
from api.bootstrap import Services, build
from api.jobs import run_jobs
from api.summaries import run_summaries
from ledger.config import Settings
from ledger.importer import import_paths
from ledger.ingest import ingest_hook
from projections import queries
from projections.context import project_digest
from projections.decode import LogReader
from projections.runner import TrackingConflict, _apply_section
from projections.search_query import SearchQueryError, search_models

from conftest import FIXTURES, Server, cli

SPOTTER = FIXTURES / "spotter-claude-transcripts" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
LATER = datetime(2030, 1, 1, tzinfo=UTC)
NOT_PROMPTS = ("<command-name>", "<command-message>", "<local-command-stdout>", "<system-reminder>",
               "<task-notification>", "Caveat:", "[Request interrupted")


def _records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _bash_commands(path: Path) -> list[str]:
    return [
        b["input"]["command"]
        for rec in _records(path)
        for b in ((rec.get("message") or {}).get("content") or [])
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == "Bash"
    ]


def _typed_prompts(path: Path) -> list[str]:
    prompts = []
    for rec in _records(path):
        msg = rec.get("message") or {}
        content = msg.get("content")
        if rec.get("type") != "user" or rec.get("isMeta") or rec.get("isCompactSummary"):
            continue
        if isinstance(content, list):
            texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            if len(texts) != len(content):
                continue  # tool results
            content = "\n".join(texts)
        if isinstance(content, str) and content.strip() and not content.lstrip().startswith(NOT_PROMPTS):
            prompts.append(content)
    return prompts


def _session_id(services: Services, external: str) -> str:
    s = services.models.table("sessions")
    with services.models.engine.connect() as conn:
        return conn.execute(select(s.c.id).where(s.c.external_id == external)).scalar_one()


def _index_counts(services: Services) -> tuple[int, int]:
    """(documents, rows in the full-text index) — equal when the index is in step."""
    docs = services.models.table("search_documents")
    with services.models.engine.connect() as conn:
        n_docs = conn.execute(select(func.count()).select_from(docs)).scalar_one()
        if conn.dialect.name == "sqlite":
            n_fts = conn.execute(text('SELECT count(*) FROM "search_fts"')).scalar_one()
        else:  # the GIN index covers every row by construction; check it is there
            found = conn.execute(text(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'search_documents_fts' "
                "AND schemaname = current_schema()"
            )).scalar_one()
            assert found == 1
            n_fts = n_docs
    return n_docs, n_fts


def test_every_bash_command_and_typed_prompt_of_a_transcript_is_found(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    sid = _session_id(services, SPOTTER.stem)
    commands = _bash_commands(SPOTTER)
    prompts = _typed_prompts(SPOTTER)
    assert len(commands) > 50 and prompts
    for command in commands:
        hits = search_models(services.models, command, kinds=("tool_input",), session_id=sid, limit=500)
        titles = [h.title for h in hits]
        assert any(t.startswith(("Bash: " + " ".join(command.split()))[:150]) for t in titles), command
    for prompt in prompts:
        hits = search_models(services.models, prompt, kinds=("prompt",), session_id=sid, limit=50)
        assert any(h.title.startswith(" ".join(prompt.split())[:100]) for h in hits), prompt
    assert _index_counts(services)[0] == len(commands) + len(prompts) + sum(
        1 for rec in _records(SPOTTER) for b in ((rec.get("message") or {}).get("content") or [])
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") != "Bash"
    )


def test_matching_is_stemmed_and_every_word_must_match(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    # "mix test …" commands: "tests" and "testing" stem to "test"
    assert search_models(services.models, "mix tests", kinds=("tool_input",))
    assert search_models(services.models, "mix testing", kinds=("tool_input",))
    both = search_models(services.models, "mix zzqqxx", kinds=("tool_input",))
    either = search_models(services.models, "mix zzqqxx", kinds=("tool_input",), any_term=True)
    assert both == [] and either
    assert all("«" in h.snippet for h in either)


@pytest.mark.parametrize("query", ['"', '(" AND', "NEAR(a b", "a* OR -b ^c", "'; DROP TABLE sessions; --", "x:y"])
def test_hostile_queries_are_words_or_a_clear_error(services: Services, query: str) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    try:
        hits = search_models(services.models, query)
    except SearchQueryError as e:
        assert "no words" in str(e)
    else:
        assert isinstance(hits, list)
    assert search_models(services.models, "spotter", limit=1)  # the store still answers


def test_summaries_and_observations_are_searchable_and_a_new_summary_replaces_the_old(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    run_jobs(services, LATER)
    run_summaries(services, now=LATER)
    sid = _session_id(services, SPOTTER.stem)
    fixes = search_models(services.models, "fixed failing mix test", kinds=("observation",), session_id=sid)
    assert fixes and all(h.title.startswith("bug_fix: Fixed failing") for h in fixes)
    summaries = search_models(services.models, "spotter gqc", kinds=("summary",), session_id=sid, limit=50)
    assert {h.title for h in summaries} >= {"Implement spotter-gqc"}

    # the session is reopened with a new prompt and ends again: its session summary is
    # rewritten, and the index holds the new text only, once
    hook = {"session_id": SPOTTER.stem, "hook_event_name": "UserPromptSubmit", "transcript_path": str(SPOTTER),
            "cwd": "/home/USER/projects/spotter-worktrees/spotter-gqc",
            "prompt": "now document the quokkaflux annotations"}
    assert ingest_hook(services.ledger, "claude-code", orjson.dumps(hook), "search-reopen-1", LATER).error is None
    run_jobs(services, LATER + timedelta(days=1))
    run_summaries(services, now=LATER + timedelta(days=1))
    found = search_models(services.models, "quokkaflux", session_id=sid, limit=50)
    assert {h.kind for h in found} == {"prompt", "summary"}
    docs = services.models.table("search_documents")
    with services.models.engine.connect() as conn:
        refs = [r[0] for r in conn.execute(select(docs.c.ref).where(docs.c.session_id == sid, docs.c.kind == "summary"))]
    assert refs.count("summary:session:0") == 1
    n_docs, n_index = _index_counts(services)
    assert n_docs == n_index


def test_a_summary_of_a_session_without_source_clock_has_the_sessions_last_activity(
    services: Services,
) -> None:
    """``codex exec --json`` output carries no times: the session's last activity is the
    ledger's clock (as ``GET /v1/sessions`` shows it), and so is its summary's
    ``occurred_at`` in a hit (it was null, and a null counted as brand new in the
    ranking)."""
    exec_json = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-3.jsonl"
    import_paths(services.ledger, [exec_json])
    run_summaries(services)
    [session] = queries.list_sessions(services.models)
    assert session["last_activity_at"] is not None
    hits = search_models(services.models, "hello", kinds=("summary",), session_id=session["id"])
    assert hits and {h.occurred_at for h in hits} == {session["last_activity_at"]}


def test_rebuild_gives_the_same_results_and_keeps_indexing(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    services.runner.catch_up()
    before = [h.as_dict() for h in search_models(services.models, "mix test", limit=100, now=LATER)]
    services.runner.rebuild("search")
    after = [h.as_dict() for h in search_models(services.models, "mix test", limit=100, now=LATER)]
    assert before == after and before
    other = FIXTURES / "agentcmd-claude-transcripts"
    import_paths(services.ledger, sorted(other.glob("*.jsonl")))
    services.runner.catch_up()
    prompts = [p for f in sorted(other.glob("*.jsonl")) for p in _typed_prompts(f)]
    assert prompts
    assert search_models(services.models, prompts[0], kinds=("prompt",))
    n_docs, n_index = _index_counts(services)
    assert n_docs == n_index


def _search_position(services: Services) -> int:
    return services.runner.positions()["search"]


def _mix_test(services: Services) -> list[dict[str, Any]]:
    return [h.as_dict() for h in search_models(services.models, "mix test", limit=100, now=LATER)]


def test_an_outdated_or_half_upgraded_search_model_is_rebuilt_with_its_index(
    settings: Settings,
) -> None:
    services = build(settings)
    try:
        import_paths(services.ledger, [SPOTTER])
        services.runner.catch_up()
        before = _mix_test(services)
        assert before
        # an older version's table had another column: the upgrade drops the table and
        # its index together, then catches up from 0
        with services.models.engine.begin() as conn:
            conn.execute(text('ALTER TABLE "search_documents" ADD COLUMN legacy TEXT'))
    finally:
        services.close()
    services = build(settings)
    try:
        assert _search_position(services) == 0
        services.runner.catch_up()
        assert _mix_test(services) == before
        assert _index_counts(services)[0] == _index_counts(services)[1]
        # an upgrade interrupted after the table and tracking row were dropped but not
        # the index: the next catch-up rewrites the index rows instead of failing on them
        docs = services.models.table("search_documents")
        tracking = services.models.tracking
        with services.models.engine.begin() as conn:
            conn.execute(text(f'DROP TABLE "{docs.name}"'))
            conn.execute(tracking.delete().where(tracking.c.name == "search"))
    finally:
        services.close()
    services = build(settings)
    try:
        services.runner.catch_up()
        assert _search_position(services) == services.ledger.max_position()
        assert _mix_test(services) == before
    finally:
        services.close()
    services = build(settings)  # and a current model is left alone (the index's own
    try:  # generated column on PostgreSQL is not a schema difference)
        assert _search_position(services) == services.ledger.max_position()
    finally:
        services.close()


def test_a_section_applied_twice_is_a_tracking_conflict_not_an_index_error(
    services: Services,
) -> None:
    """Two runners racing over the same section: the loser's transaction fails on its
    tracking position (and is retried by ``catch_up``), never on the index rows."""
    import_paths(services.ledger, [SPOTTER])
    search = [p for p in services.runner.projections if p.name == "search"]
    read = LogReader(services.ledger, type(search[0]).consumes).read(0, 500)
    assert read.events  # prompts and tool calls to index
    models = services.models
    assert _apply_section(models, search, models.tracking, read, {"search": 0}, {}) == 500
    with pytest.raises(TrackingConflict):
        _apply_section(models, search, models.tracking, read, {"search": 0}, {})
    with pytest.raises(TrackingConflict):
        _apply_section(models, search, models.tracking, read, {"search": 0}, {"search": 0})
    services.runner.catch_up()
    n_docs, n_index = _index_counts(services)
    assert n_docs == n_index and n_docs > 0


def test_words_with_accents_and_underscores_are_found_on_both_backends(services: Services) -> None:
    hook = {"session_id": "accents-1", "hook_event_name": "UserPromptSubmit", "cwd": "/tmp/p",
            "prompt": "rename the résumé_parser in naïve/café.py"}
    result = ingest_hook(services.ledger, "claude-code", orjson.dumps(hook), "accents-1", LATER)
    assert result.error is None
    services.runner.catch_up()
    for query in ("résumé", "parser", "naïve café", "résumé_parser"):
        hits = search_models(services.models, query, kinds=("prompt",))
        assert [h.title for h in hits] == ["rename the résumé_parser in naïve/café.py"], query


def test_api_search_and_its_errors(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    with TestClient(create_app(services)) as client:
        ok = client.get("/v1/search", params={"q": "mix test", "kind": "tool_input", "limit": 3})
        assert ok.status_code == 200
        hits = ok.json()["hits"]
        assert len(hits) == 3 and all(h["kind"] == "tool_input" and h["agent"] == "claude-code" for h in hits)
        recent = client.get("/v1/search", params={"q": "mix test", "order": "recent", "limit": 5}).json()["hits"]
        assert [h["position"] for h in recent] == sorted((h["position"] for h in recent), reverse=True)
        assert client.get("/v1/search", params={"q": "  "}).status_code == 400
        assert client.get("/v1/search", params={"q": "x", "kind": "bogus"}).status_code == 400
        assert client.get("/v1/search", params={"q": "x", "limit": "0"}).status_code == 400
        assert client.get("/v1/search", params={"q": "x", "order": "worst"}).status_code == 400
        assert client.get("/v1/search", params={"q": "x", "session": "no-such"}).status_code == 404


def test_context_digest_leads_with_relevant_memory(services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    run_jobs(services, LATER)
    run_summaries(services, now=LATER)
    cwd = "/home/USER/projects/spotter-worktrees/spotter-gqc"
    digest = project_digest(services.models, cwd, query="mix test failing")
    memory, _, sessions = digest.partition("# Recent sessions in")
    assert memory.startswith(f"# What hookledger remembers about {cwd}")
    assert "bug_fix: Fixed failing `mix test" in memory
    assert "Implement spotter-gqc" in sessions
    assert len(digest) <= 10_000
    with TestClient(create_app(services)) as client:
        body = client.get("/v1/context", params={"cwd": cwd, "q": "mix test failing"}).json()
        slash = client.get("/v1/context", params={"cwd": cwd + "//", "q": "mix test failing"})
    assert body["markdown"] == digest
    assert slash.json()["markdown"] == digest  # a trailing "/" found nothing


def test_cli_search(settings: Any, services: Services) -> None:
    import_paths(services.ledger, [SPOTTER])
    out = json.loads(cli(settings, "search", "--json", "--kind", "prompt", "implement", "spotter").stdout)
    assert [h["title"] for h in out["hits"]] == ["Implement spotter-gqc"]
    bad = cli(settings, "search", '"', check=False)
    assert bad.returncode == 1 and b"no words" in bad.stderr


def test_a_prompt_sent_to_a_live_server_is_searchable(settings: Any) -> None:
    srv = Server(settings).start()
    try:
        hook = {"session_id": "search-live-1", "hook_event_name": "UserPromptSubmit", "cwd": "/tmp/p",
                "transcript_path": "/tmp/p.jsonl", "prompt": "rename the zorbulator module"}
        assert httpx.post(srv.url + "/v1/hooks/claude-code", json=hook, timeout=10).status_code == 202
        deadline = time.monotonic() + 20
        hits: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not hits:
            hits = httpx.get(srv.url + "/v1/search", params={"q": "zorbulator"}, timeout=10).json()["hits"]
            time.sleep(0.05)
        assert [(h["kind"], h["title"], h["cwd"]) for h in hits] == [("prompt", "rename the zorbulator module", "/tmp/p")]
    finally:
        srv.stop()
