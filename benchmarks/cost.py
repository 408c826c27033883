"""Cost of pricing one usage event (what the sessions and batches projections add per
``UsageRecorded``): ``.venv/bin/python benchmarks/cost.py [N]``. See docs/benchmarks.md."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime

from ledger.lifecycle import SessionStatus
from ledger.session import Session
from projections.sessions import usage_cost


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    event = Session.UsageRecorded(
        originator_id=uuid.uuid4(), originator_version=2, timestamp=datetime.now(UTC),
        event_key="usage:m", agent="claude-code", source_format="benchmark",
        status=SessionStatus.ACTIVE, message_id="m", model="claude-sonnet-4-5-20250929",
        input_tokens=10, output_tokens=20, cache_read_input_tokens=30_000,
        cache_creation_input_tokens=400,
    )
    t = time.perf_counter()
    for _ in range(n):
        usage_cost(event)
    elapsed = time.perf_counter() - t
    print(f"usage_cost: {elapsed / n * 1e6:.2f} µs per usage event ({n:,} calls)")


if __name__ == "__main__":
    main()
