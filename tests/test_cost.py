"""Computed cost (USD) per usage, prompt batch and session, and the agent's own figure.

Expected costs are computed here independently: usage read from the fixture files with
plain json (``tests/oracle.py`` rules: records deduplicated by uuid, usage grouped by
``message.id``, the last record wins), times the prices read from the checked-in table
``projections/data/prices.json`` with plain json. Cache writes: the 1-hour part
(``usage.cache_creation.ephemeral_1h_input_tokens``) at ``cache_write_1h``, the rest of
``cache_creation_input_tokens`` at ``cache_write`` (the 5-minute rate).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text

from api.bootstrap import Services, build
from ledger.importer import import_paths
from ledger.observation import Observation, SessionRef
from projections import queries

import oracle
from conftest import FIXTURES, Server, cli

ROOT = Path(__file__).resolve().parent.parent
PRICES = json.loads((ROOT / "projections" / "data" / "prices.json").read_text())["models"]
TOKENS = oracle.TOKEN_FIELDS


def _price(model: Any) -> dict | None:
    if not isinstance(model, str):
        return None
    return PRICES.get(re.sub(r"\[[^\]]*\]$", "", model.lower()))


def _hour_writes(usage: dict) -> int:
    """The 1-hour cache writes of a raw Anthropic usage object, or of a read-model row."""
    split = usage.get("cache_creation")
    if isinstance(split, dict):
        return split.get("ephemeral_1h_input_tokens") or 0
    return usage.get("cache_creation_1h_input_tokens") or 0


def _usd(price: dict, usage: dict) -> float:
    n = {f: usage.get(f) or 0 for f in TOKENS}
    hour = _hour_writes(usage)
    prompt = n["input_tokens"] + n["cache_read_input_tokens"] + n["cache_creation_input_tokens"]
    hour_rate = price.get("cache_write_1h")
    if "above" in price and prompt > price["above"]["tokens"]:  # long-context request
        if "cache_write" in price["above"]:  # no long-context 1-hour rate in the table
            hour_rate = price["above"].get("cache_write_1h")
        price = {**price, **price["above"]}
    write = price.get("cache_write", price["input"])
    return (
        n["input_tokens"] * price["input"]
        + n["output_tokens"] * price["output"]
        + n["cache_read_input_tokens"] * price.get("cache_read", price["input"])
        + (n["cache_creation_input_tokens"] - hour) * write
        + hour * (write if hour_rate is None else hour_rate)
    ) / 1e6


def expected_costs(path: Path) -> dict[str, dict[str, float]]:
    """session key -> {"cost_usd", "unpriced_tokens"}: last usage per message id."""
    records, _ = oracle.read_records(path)
    records = oracle.dedupe(records)
    by_uuid = {r["uuid"]: r for r in records if r.get("uuid") is not None}
    last: dict[str, dict[Any, tuple[Any, dict]]] = defaultdict(dict)
    for i, rec in enumerate(records):
        key = oracle.session_key(rec, by_uuid)
        msg = rec.get("message")
        if key is None or rec.get("type") != "assistant" or not isinstance(msg, dict):
            continue
        if isinstance(msg.get("usage"), dict):
            last[key][msg.get("id") or ("record", i)] = (msg.get("model"), msg["usage"])
    out = {}
    for key, messages in last.items():
        cost, unpriced = 0.0, 0
        for model, usage in messages.values():
            price = _price(model)
            if price is None:
                unpriced += sum(usage.get(f) or 0 for f in TOKENS)
            else:
                cost += _usd(price, usage)
        out[key] = {"cost_usd": cost, "unpriced_tokens": unpriced}
    return out


def expected_days(paths: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(UTC day, model or "(none)") -> cost_usd, unpriced_tokens, cache writes (all, 1-hour)
    of the last usage per message id, on the day (source clock) of the first record that
    carries it (a repeated usage is one fact)."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {"cost_usd": 0.0, "unpriced_tokens": 0, "cache_creation_input_tokens": 0,
                 "cache_creation_1h_input_tokens": 0})
    for path in paths:
        records = oracle.dedupe(oracle.read_records(path)[0])
        by_uuid = {r["uuid"]: r for r in records if r.get("uuid") is not None}
        last: dict[Any, tuple[Any, dict, str]] = {}
        for i, rec in enumerate(records):
            key = oracle.session_key(rec, by_uuid)
            msg = rec.get("message")
            if key is None or rec.get("type") != "assistant" or not isinstance(msg, dict):
                continue
            if isinstance(msg.get("usage"), dict):
                mid = (key, msg.get("id") or ("record", i))
                same = mid in last and last[mid][1] == msg["usage"]
                at = last[mid][2] if same else rec["timestamp"]
                last[mid] = (msg.get("model"), msg["usage"], at)
        for model, usage, at in last.values():
            day = datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone(UTC).date()
            row = out[(day.isoformat(), model or "(none)")]
            price = _price(model)
            if price is None:
                row["unpriced_tokens"] += sum(usage.get(f) or 0 for f in TOKENS)
            else:
                row["cost_usd"] += _usd(price, usage)
            row["cache_creation_input_tokens"] += usage.get("cache_creation_input_tokens") or 0
            row["cache_creation_1h_input_tokens"] += _hour_writes(usage)
    return out


def test_cost_per_day_and_sessions_match_the_raw_fixture_json(settings) -> None:  # type: ignore[no-untyped-def]
    """Every Claude Code transcript fixture imported into one store: ``hookledger
    analytics cost-per-day`` and the sessions' ``cost_usd`` equal the recomputation from
    the raw JSON, 1-hour cache writes (``cache_creation.ephemeral_1h_input_tokens``) at
    the 1-hour rate (opus-4-6: 10.0 USD/MTok, not 6.25: 2026-02-11 showed $10.64 for
    $11.96)."""
    paths = [FIXTURES / rel for rel in oracle.TRANSCRIPT_FILES]
    cli(settings, "import", *map(str, paths))
    want = expected_days(paths)
    assert sum(w["cache_creation_1h_input_tokens"] for w in want.values()) > 900_000
    got = json.loads(cli(settings, "analytics", "cost-per-day", "--json").stdout)
    assert {(r["day"], r["model"]) for r in got} == set(want)
    for r in got:
        w = want[(r["day"], r["model"])]
        assert r["cost_usd"] == pytest.approx(w["cost_usd"], abs=1e-6), (r["day"], r["model"])
        assert r["unpriced_tokens"] == w["unpriced_tokens"]
        assert r["cache_creation_input_tokens"] == w["cache_creation_input_tokens"]
        assert r["cache_creation_1h_input_tokens"] == w["cache_creation_1h_input_tokens"]
    opus = want[("2026-02-11", "claude-opus-4-6")]["cost_usd"]
    assert opus == pytest.approx(11.962337, abs=1e-6)
    sessions = {r["external_id"]: r for r in json.loads(cli(settings, "sessions", "--json").stdout)}
    expected = {k: v for p in paths for k, v in expected_costs(p).items()}
    for key, w in expected.items():
        assert sessions[key]["cost_usd"] == pytest.approx(w["cost_usd"], rel=1e-9, abs=1e-12), key


def _rows(services: Services, table: str, session_id: str) -> list[dict[str, Any]]:
    t = services.models.table(table)
    q = select(t).where(t.c.session_id == session_id)
    with services.models.engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def _check_batches_add_up(services: Services, session: dict[str, Any]) -> None:
    """Session cost = its batches' costs + the usage counted in no batch row."""
    batches = _rows(services, "prompt_batches", session["id"])
    usage = _rows(services, "session_usage", session["id"])
    numbered = {b["batch"] for b in batches}
    outside = [u for u in usage if u["batch"] not in numbered]
    total = sum(b["cost_usd"] for b in batches) + sum(u["cost_usd"] or 0 for u in outside)
    assert session["cost_usd"] == pytest.approx(total, rel=1e-9, abs=1e-12)
    unpriced = sum(b["unpriced_tokens"] for b in batches)
    assert session["unpriced_tokens"] == unpriced + sum(u["unpriced_tokens"] for u in outside)
    for t in TOKENS:
        assert session[t] == sum(b[t] for b in batches) + sum(u[t] for u in outside)


def test_the_fixtures_carry_priced_usage() -> None:
    """Guard against a vacuous cost test: most transcripts have priced usage."""
    priced = [
        rel for rel in oracle.TRANSCRIPT_FILES
        if any(v["cost_usd"] > 0 for v in expected_costs(FIXTURES / rel).values())
    ]
    assert len(priced) >= 10, priced


@pytest.mark.parametrize("relpath", oracle.TRANSCRIPT_FILES)
def test_transcript_cost_matches_independent_computation(services: Services, relpath: str) -> None:
    expected = expected_costs(FIXTURES / relpath)
    summary = import_paths(services.ledger, [FIXTURES / relpath])
    assert summary.files == 1, summary.skipped
    services.runner.catch_up()
    sessions = {r["external_id"]: r for r in queries.list_sessions(services.models)}
    for key, want in expected.items():
        got = sessions[key]
        assert got["cost_usd"] == pytest.approx(want["cost_usd"], rel=1e-9, abs=1e-12), key
        assert got["unpriced_tokens"] == want["unpriced_tokens"], key
        assert got["agent_cost_usd"] is None  # transcripts carry no agent cost figure
    for s in sessions.values():
        _check_batches_add_up(services, s)
    usage = [u for s in sessions.values() for u in _rows(services, "session_usage", s["id"])]
    for u in usage:  # per usage: priced -> cost, unknown model -> None and counted
        if _price(u["model"]) is None:
            assert u["cost_usd"] is None
            assert u["unpriced_tokens"] == sum(u[t] for t in TOKENS)
        else:
            assert u["cost_usd"] == pytest.approx(_usd(_price(u["model"]), u), rel=1e-9)
            assert u["unpriced_tokens"] == 0


# -- stream-json run: computed cost beside the agent's own total_cost_usd ------------------

STREAM = FIXTURES / "claude_code-elixir-stream-json"


def _stream_observations(path: Path, ext: str) -> tuple[list[Observation], dict[str, Any]]:
    """A prompt, every assistant usage (keyed like the transcript source: message id +
    token hash, so a changed figure for a message is a new fact) and the result's cost."""
    ref = SessionRef("claude-code", ext)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    obs = [Observation(ref, "PromptSubmitted", f"{ext}:prompt", {"text": "run"}, "test",
                       occurred_at=at)]
    last: dict[str, tuple[str, dict]] = {}
    reported = 0.0
    for n, line in enumerate(path.read_text().splitlines()):
        rec = json.loads(line)
        if rec.get("type") == "assistant":
            msg = rec["message"]
            tokens = {f: msg["usage"].get(f) or 0 for f in TOKENS}
            last[msg["id"]] = (msg["model"], tokens)
            obs.append(Observation(
                ref, "UsageRecorded", f"usage:{msg['id']}:{sorted(tokens.items())}",
                {"message_id": msg["id"], "model": msg["model"], **tokens}, "test",
                occurred_at=at,
            ))
        elif rec.get("type") == "result":
            reported += rec["total_cost_usd"]
            obs.append(Observation(ref, "CostReported", f"{ext}:result:{n}",
                                   {"cost_usd": rec["total_cost_usd"]}, "test", occurred_at=at))
    computed = sum(_usd(_price(m), t) for m, t in last.values())  # type: ignore[arg-type]
    return obs, {"computed": computed, "reported": reported}


def test_agent_cost_kept_beside_computed_cost(services: Services) -> None:
    files = sorted(STREAM.glob("*.jsonl"))
    want = {}
    for f in files:
        obs, want[f.stem] = _stream_observations(f, f.stem)
        services.ledger.record(obs)
    services.runner.catch_up()
    sessions = {r["external_id"]: r for r in queries.list_sessions(services.models)}
    for stem, w in want.items():
        s = sessions[stem]
        assert w["reported"] > 0 and w["computed"] > 0
        assert s["agent_cost_usd"] == pytest.approx(w["reported"], rel=1e-12)
        assert s["cost_usd"] == pytest.approx(w["computed"], rel=1e-9)
        assert s["cost_usd"] != s["agent_cost_usd"]  # two figures, never merged
        (batch,) = _rows(services, "prompt_batches", s["id"])
        assert batch["agent_cost_usd"] == pytest.approx(w["reported"], rel=1e-12)
        _check_batches_add_up(services, s)


def test_unknown_model_is_unpriced_and_replacement_moves_the_difference(services: Services) -> None:
    ref = SessionRef("claude-code", "replace-test")
    p = PRICES["claude-sonnet-4-5-20250929"]

    def usage(key: str, model: str, inp: int, out: int) -> Observation:
        return Observation(ref, "UsageRecorded", key, {"message_id": "m1", "model": model,
                           "input_tokens": inp, "output_tokens": out}, "test")

    services.ledger.record([Observation(ref, "PromptSubmitted", "p1", {"text": "one"}, "test")])
    services.ledger.record([usage("u1", "no-such-model", 100, 50)])
    services.runner.catch_up()
    (s,) = queries.list_sessions(services.models)
    assert (s["cost_usd"], s["unpriced_tokens"]) == (0.0, 150)
    (u,) = _rows(services, "session_usage", s["id"])
    assert u["cost_usd"] is None

    # The same message re-recorded (last wins) with a priced model, in a later batch.
    services.ledger.record([Observation(ref, "PromptSubmitted", "p2", {"text": "two"}, "test")])
    services.ledger.record([usage("u2", "claude-sonnet-4-5-20250929", 1000, 10)])
    services.runner.catch_up()
    (s,) = queries.list_sessions(services.models)
    expected = (1000 * p["input"] + 10 * p["output"]) / 1e6
    assert s["cost_usd"] == pytest.approx(expected, rel=1e-12)
    assert s["unpriced_tokens"] == 0
    assert (s["input_tokens"], s["output_tokens"]) == (1000, 10)
    b1, b2 = sorted(_rows(services, "prompt_batches", s["id"]), key=lambda b: b["batch"])
    assert (b1["cost_usd"], b1["unpriced_tokens"], b1["input_tokens"]) == (0.0, 0, 0)
    assert b2["cost_usd"] == pytest.approx(expected, rel=1e-12)
    _check_batches_add_up(services, s)


def test_every_fixture_session_is_priced_from_its_usage(services: Services) -> None:
    """A store holding every importable fixture (every agent whose source is present):
    each session's cost is the sum of its usage rows priced with the table (read with
    plain json here), unknown models are counted as unpriced, and batches add up."""
    import_paths(services.ledger, [FIXTURES])
    services.runner.catch_up()
    sessions = queries.list_sessions(services.models)
    assert len({s["agent"] for s in sessions}) >= 1
    priced = 0
    for s in sessions:
        usage = _rows(services, "session_usage", s["id"])
        known = [u for u in usage if _price(u["model"]) is not None]
        want = sum(_usd(_price(u["model"]), u) for u in known)  # type: ignore[arg-type]
        assert s["cost_usd"] == pytest.approx(want, rel=1e-9, abs=1e-12), s["external_id"]
        unknown = [u for u in usage if _price(u["model"]) is None]
        assert s["unpriced_tokens"] == sum(u[t] for u in unknown for t in TOKENS)
        _check_batches_add_up(services, s)
        priced += want > 0
    assert priced >= 10


def test_cli_and_api_show_cost(settings) -> None:  # type: ignore[no-untyped-def]
    cli(settings, "import", str(FIXTURES))
    rows = json.loads(cli(settings, "sessions", "--json").stdout)
    assert rows and all({"agent", "cost_usd", "agent_cost_usd", "unpriced_tokens"} <= r.keys()
                        for r in rows)
    assert any(r["cost_usd"] > 0 for r in rows)
    text = cli(settings, "sessions").stdout.decode()
    for r in rows:
        assert f"cost=${r['cost_usd']:.4f}" in text or f"cost>=${r['cost_usd']:.4f}" in text
    server = Server(settings).start()
    try:
        over_http = httpx.get(server.url + "/v1/sessions", timeout=30).json()["sessions"]
    finally:
        server.stop()
    assert over_http == rows


def test_read_models_of_an_older_schema_are_rebuilt(settings) -> None:  # type: ignore[no-untyped-def]
    """A views database written before the cost columns existed upgrades itself."""
    s = build(settings)
    try:
        import_paths(s.ledger, [FIXTURES / "spotter-claude-transcripts"])
        s.runner.catch_up()
        want = queries.list_sessions(s.models)
        with s.models.engine.begin() as conn:  # the schema before this change
            conn.execute(text("ALTER TABLE sessions DROP COLUMN cost_usd"))
            conn.execute(text("ALTER TABLE prompt_batches DROP COLUMN cost_usd"))
    finally:
        s.close()
    s = build(settings)
    try:
        status = {p.name: p.position for p in s.runner.status()}
        assert status["sessions"] == 0 and status["batches"] == 0  # reset, rebuilt below
        assert status["tool_calls"] > 0  # untouched projections keep their position
        s.runner.catch_up()
        assert queries.list_sessions(s.models) == want
    finally:
        s.close()


def test_stream_json_one_hour_cache_writes_are_priced_at_their_rate(
    services: Services, tmp_path: Path
) -> None:
    """A real stream-json capture whose usage carries the TTL split (as CLI 2.x writes
    it: ``cache_creation{ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}``; the
    capture's build wrote none, so it is added here): every assistant usage keeps its
    1-hour part, and the ``result``'s usage beyond the streamed records keeps the rest
    of it (600 of 1,000 more cache writes), each priced as the raw JSON says."""
    lines = []
    for line in (STREAM / "create_file.jsonl").read_text().splitlines():
        rec = json.loads(line)
        usage = (rec.get("message") or {}).get("usage") if rec.get("type") == "assistant" else None
        if rec.get("type") == "result":
            usage = rec["usage"]
            usage["cache_creation_input_tokens"] += 1000  # not streamed: the rest
        if usage is not None:
            hour = usage["cache_creation_input_tokens"] - (400 if rec["type"] == "result" else 0)
            usage["cache_creation"] = {
                "ephemeral_5m_input_tokens": usage["cache_creation_input_tokens"] - hour,
                "ephemeral_1h_input_tokens": hour,
            }
        lines.append(json.dumps(rec))
    path = tmp_path / "create_file.jsonl"
    path.write_text("\n".join(lines) + "\n")
    import_paths(services.ledger, [path])
    services.runner.catch_up()
    (s,) = [s for s in queries.list_sessions(services.models) if s["agent"] == "claude-code"]
    usage = {u["message_id"]: u for u in _rows(services, "session_usage", s["id"])}
    streamed = {k: u for k, u in usage.items() if not k.endswith(":unstreamed")}
    (rest,) = [u for k, u in usage.items() if k.endswith(":unstreamed")]
    assert all(u["cache_creation_1h_input_tokens"] == u["cache_creation_input_tokens"] > 0
               for u in streamed.values())
    assert (rest["cache_creation_input_tokens"], rest["cache_creation_1h_input_tokens"]) == (1000, 600)
    assert rest["model"] is not None and _price(rest["model"]) is not None  # the run's one model
    want = sum(_usd(_price(u["model"]), u) for u in usage.values())  # type: ignore[arg-type]
    assert s["cost_usd"] == pytest.approx(want, rel=1e-9)
    assert s["cache_creation_input_tokens"] == sum(u["cache_creation_input_tokens"] for u in usage.values())
