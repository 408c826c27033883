"""Agent sources and the runner: import speed of the Codex/stream-json fixtures and the
runner's per-line recording rate. See docs/benchmarks.md ("Agents: runner and Codex").

Usage: ``.venv/bin/python benchmarks/agents.py [--lines N] [--postgres URL]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from api.bootstrap import build
from ledger.agent_runner import run_agent
from ledger.config import Settings
from ledger.importer import import_paths

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
FAKE = ROOT / "tests" / "tools" / "fake_agent.py"
IMPORTS = [
    *sorted((FIX / "agentcmd-codex-rollouts").glob("rollout-*.jsonl")),
    *sorted((FIX / "agentcmd-codex-exec-json").glob("*.jsonl")),
    *sorted((FIX / "claude_code-elixir-stream-json").glob("*.jsonl")),
]


def _settings(tmp: Path, pg: str | None) -> Settings:
    if pg is None:
        return Settings(tmp / "data")
    import psycopg

    schema = f"agents_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return Settings(tmp / "data", database_url=pg, database_schema=schema)


def _drop(pg: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _long_exec_stream(path: Path, lines: int) -> None:
    """A real exec stream (stream-output-4) with its items repeated to ``lines`` lines."""
    src = [
        json.loads(x)
        for x in (FIX / "agentcmd-codex-exec-json" / "stream-output-4.jsonl")
        .read_text()
        .splitlines()
    ]
    head, items, tail = src[:2], src[2:-1], src[-1]
    out = [*head]
    while len(out) < lines - 1:
        out.extend(items)
    out = [*out[: lines - 1], tail]
    path.write_text("\n".join(json.dumps(r) for r in out) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--postgres", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--cache",
        type=int,
        default=16,
        help="aggregate cache size (0 = none; hookledger run uses 16)",
    )
    args = ap.parse_args()
    import_rates, run_rates = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            services = build(_settings(Path(d), args.postgres), cache_size=args.cache)
            t0 = time.perf_counter()
            summary = import_paths(services.ledger, IMPORTS)
            dt = time.perf_counter() - t0
            import_rates.append(summary.result.appended / dt)
            stream = Path(d) / "long.jsonl"
            _long_exec_stream(stream, args.lines)
            t0 = time.perf_counter()
            outcome = run_agent(services.ledger, [sys.executable, str(FAKE), str(stream)])
            dt = time.perf_counter() - t0
            assert outcome.outcome == "completed"
            run_rates.append(args.lines / dt)
            services.close()
            if services.settings.database_schema:
                _drop(args.postgres, services.settings.database_schema)
    backend = "postgres" if args.postgres else "sqlite"
    print(
        json.dumps(
            {
                "backend": backend,
                "import_events_per_s": round(statistics.median(import_rates)),
                "import_events": summary.result.appended,
                "runner_lines": args.lines,
                "runner_lines_per_s": round(statistics.median(run_rates)),
                "runner_ms_per_line": round(1000 / statistics.median(run_rates), 2),
                "repeats": args.repeats,
                "aggregate_cache": args.cache,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
