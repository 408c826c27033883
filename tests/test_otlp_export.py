"""``hookledger export --format otlp``: OTLP JSON traces with the GenAI conventions.

The file is parsed with protobuf's own JSON parser into the OTLP
``ExportTraceServiceRequest`` (package ``opentelemetry-proto``; unknown fields are
errors), after turning the OTLP/JSON hex ids into the protobuf mapping's base64 — the
one documented difference between OTLP/JSON and the plain protobuf JSON mapping.
Counts and token sums are compared with SQL over the read models and with tool-use
blocks counted in the fixture with plain ``json``.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from api.bootstrap import Services
from ledger.config import Settings
from ledger.importer import discover, import_paths

from conftest import FIXTURES, PG_URL, cli

SPOTTER = FIXTURES / "spotter-claude-transcripts"


def sql(settings: Settings, query: str) -> list[tuple[Any, ...]]:
    if settings.database_url:
        with psycopg.connect(PG_URL) as conn:
            conn.execute(f'SET search_path TO "{settings.database_schema}"')
            return conn.execute(query).fetchall()
    with sqlite3.connect(settings.data_dir / "views.db") as db:
        return db.execute(query).fetchall()


def fixture_tool_uses() -> set[str]:
    """tool_use block ids in the Spotter transcripts, counted with plain json."""
    ids = set()
    for path in SPOTTER.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                content = json.loads(line).get("message", {}).get("content")
            except (ValueError, AttributeError):
                continue
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    ids.add(block["id"])
    return ids


def to_protobuf_json(request: dict[str, Any]) -> str:
    """OTLP/JSON ids are hex; the protobuf JSON mapping wants base64 for bytes fields."""
    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = b64(span[key])
                for link in span.get("links", []):
                    link["traceId"], link["spanId"] = b64(link["traceId"]), b64(link["spanId"])
    return json.dumps(request)


def parse(path: Path) -> list[Span]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    message = json_format.Parse(to_protobuf_json(raw), ExportTraceServiceRequest())
    return [s for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans]


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        field = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, field)
    return out


def export_otlp(settings: Settings, services: Services, tmp_path: Path, *extra: str) -> list[Span]:
    import_paths(services.ledger, discover([SPOTTER]))
    out = tmp_path / "traces.json"
    cli(settings, "export", "--format", "otlp", "--output", str(out), *extra)
    return parse(out)


def test_otlp_export_parses_and_matches_the_read_models(
    settings: Settings, services: Services, tmp_path: Path
) -> None:
    spans = export_otlp(settings, services, tmp_path)
    by_op = Counter(attrs(s).get("gen_ai.operation.name") for s in spans)

    # ids: 16-byte traces, 8-byte spans, unique, parents inside their own trace
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)
    ids = {(s.trace_id, s.span_id) for s in spans}
    assert len(ids) == len(spans)
    assert all((s.trace_id, s.parent_span_id) in ids for s in spans if s.parent_span_id)
    assert all(s.start_time_unix_nano <= s.end_time_unix_nano for s in spans)
    assert all(1.7e18 < s.start_time_unix_nano < 1.9e18 for s in spans)  # 2023..2030

    # sessions: one trace each, root span invoke_agent, trace id = ledger id
    sessions = {r[0]: r[1:] for r in sql(
        settings, "SELECT id, external_id, agent, input_tokens + cache_creation_input_tokens"
        " + cache_read_input_tokens, output_tokens FROM sessions")}
    roots = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "invoke_agent"]
    assert by_op["invoke_agent"] == len(sessions) == len({s.trace_id for s in spans})
    for s in roots:
        a = attrs(s)
        external_id, agent, input_tokens, output_tokens = sessions[str(UUID(bytes=s.trace_id))]
        assert not s.parent_span_id
        assert a["gen_ai.conversation.id"] == external_id
        assert a["gen_ai.agent.name"] == agent == "claude-code"
        assert a["gen_ai.provider.name"] == "anthropic"
        assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
            input_tokens, output_tokens)

    # tool calls: one execute_tool span each, errors as ERROR status
    tools = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]
    (n_calls, n_errors), = sql(settings, "SELECT count(*), sum(CASE WHEN is_error THEN 1 ELSE 0"
                                          " END) FROM tool_calls")
    assert len(tools) == n_calls
    assert {attrs(s)["gen_ai.tool.call.id"] for s in tools} == fixture_tool_uses()
    errors = [s for s in tools if s.status.code == Status.STATUS_CODE_ERROR]
    assert len(errors) == n_errors > 0
    assert all(attrs(s)["error.type"] == "tool_error" and s.status.message for s in errors)
    assert all(s.name == "execute_tool " + attrs(s)["gen_ai.tool.name"] for s in tools)

    # model calls: one chat span per usage record; token sums equal the read model's
    chats = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "chat"]
    (n_usage, inp, out, cache_read, cache_write), = sql(
        settings, "SELECT count(*), sum(input_tokens), sum(output_tokens), "
        "sum(cache_read_input_tokens), sum(cache_creation_input_tokens) FROM session_usage")
    assert len(chats) == n_usage > 0
    total = Counter()
    for s in chats:
        total.update({k: v for k, v in attrs(s).items() if k.startswith("gen_ai.usage.")})
    assert total["gen_ai.usage.input_tokens"] == inp + cache_read + cache_write
    assert total["gen_ai.usage.output_tokens"] == out
    assert total["gen_ai.usage.cache_read.input_tokens"] == cache_read
    assert total["gen_ai.usage.cache_creation.input_tokens"] == cache_write

    # prompt batches: one span each under the session's root
    (n_batches,), = sql(settings, "SELECT count(*) FROM prompt_batches")
    batches = [s for s in spans if s.name.startswith("prompt_batch ")]
    assert len(batches) == n_batches
    root_ids = {(s.trace_id, s.span_id) for s in roots}
    assert all((s.trace_id, s.parent_span_id) in root_ids for s in batches)

    # subagent runs link to the parent session's trace
    children = sql(settings, "SELECT id, parent_id FROM sessions WHERE parent_id IS NOT NULL")
    assert children
    for child, parent in children:
        (root,) = [s for s in roots if s.trace_id == UUID(child).bytes]
        assert [link.trace_id for link in root.links] == [UUID(parent).bytes]


def test_otlp_export_of_one_session(
    settings: Settings, services: Services, tmp_path: Path
) -> None:
    import_paths(services.ledger, discover([SPOTTER / "tool_heavy.jsonl", SPOTTER / "short.jsonl"]))
    services.runner.catch_up()
    (sid, calls), = sql(settings, "SELECT id, tool_call_count FROM sessions "
                                  "ORDER BY tool_call_count DESC LIMIT 1")
    out = tmp_path / "one.json"
    cli(settings, "export", "--format", "otlp", "--session", sid, "--output", str(out))
    spans = parse(out)
    assert {s.trace_id for s in spans} == {UUID(sid).bytes}
    assert sum(s.name.startswith("execute_tool ") for s in spans) == calls > 0
