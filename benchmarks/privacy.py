"""Cost of privacy at capture on the real fixtures: the byte-level pre-check and the walk.

Usage: ``.venv/bin/python benchmarks/privacy.py [--repeat N] [--import-ab]``. Reads every
JSONL line and JSON document of the transcript fixtures the import benchmark uses
(``benchmarks/run.py`` ``SOURCES``), then times, per line: the pre-check
(:func:`ledger.privacy.may_hold_private`), the walk (:func:`ledger.privacy.strip_private`)
on the lines it lets through, the same with the standard-library literal scan instead of
the Aho–Corasick automaton (``_fallback``), and the same two steps as they were before
the secret catalogue (``<private>`` tags only). Prints one JSON object (MB/s and µs per
line; best of ``--repeat`` runs). ``--import-ab`` also imports the corpus into a fresh SQLite store,
alternately with the secret catalogue and with it switched off (``<private>`` tags only),
``--repeat`` times each, and reports the best events/s of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.run import SOURCES
from ledger.privacy import may_hold_private, strip_private, strip_private_text


def _tags_only_precheck(raw: bytes) -> bool:
    return b"\\u" in raw or b"private" in raw.lower()


def _tags_only_walk(value: Any) -> Any:
    if isinstance(value, str):
        return strip_private_text(value)[0]
    if isinstance(value, dict):
        return {k: _tags_only_walk(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tags_only_walk(v) for v in value]
    return value


def lines() -> list[bytes]:
    out: list[bytes] = []
    for path in SOURCES:
        data = path.read_bytes()
        out.extend(
            x for x in (data.split(b"\n") if path.suffix == ".jsonl" else [data]) if x.strip()
        )
    return out


def best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def import_ab(repeat: int) -> dict[str, Any]:
    import tempfile

    import ledger.privacy as privacy
    from api.bootstrap import build
    from ledger.config import Settings
    from ledger.importer import import_paths
    from ledger.secrets import ruleset

    real = (
        privacy.redact_secrets,
        privacy.redact_field_value,
        privacy.rules_for,
    )
    off = (
        lambda text, rules=None: (text, {}),
        lambda k, v: (v, None),
        lambda raw, value=None: ruleset((), fields=False, private=_tags_only_precheck(raw)),
    )
    best_rate: dict[str, float] = {}
    for _ in range(repeat):
        for name, funcs in (("tags_only", off), ("tags_and_secrets", real)):
            (
                privacy.redact_secrets,
                privacy.redact_field_value,
                privacy.rules_for,
            ) = funcs
            with tempfile.TemporaryDirectory() as d:
                services = build(Settings(Path(d)))
                t = time.perf_counter()
                appended = import_paths(services.ledger, SOURCES).result.appended
                rate = appended / (time.perf_counter() - t)
                services.close()
            best_rate[name] = max(best_rate.get(name, 0.0), round(rate))
    (
        privacy.redact_secrets,
        privacy.redact_field_value,
        privacy.rules_for,
    ) = real
    return {"events": appended, "events_per_s": best_rate}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--import-ab", action="store_true")
    args = parser.parse_args()
    corpus = lines()
    records = [orjson.loads(x) for x in corpus]
    mb = sum(len(x) for x in corpus) / 1e6
    result: dict[str, Any] = {"lines": len(corpus), "mb": round(mb, 2)}
    from ledger import literals, secrets

    def full_walk(rec: Any, raw: bytes) -> Any:
        return strip_private(rec, raw=raw)

    # _fallback: the same, with the standard-library scan instead of the automaton
    for name, automaton, check, walk in [
        ("tags_and_secrets", True, may_hold_private, full_walk),
        ("tags_and_secrets_fallback", False, may_hold_private, full_walk),
        ("tags_only", True, _tags_only_precheck, lambda rec, raw: _tags_only_walk(rec)),
    ]:
        literals.USE_AUTOMATON = automaton
        secrets.reset_scans()
        passed = [(r, x) for x, r in zip(corpus, records, strict=True) if check(x)]
        t_check = best(lambda check=check: [check(x) for x in corpus], args.repeat)
        t_walk = best(lambda walk=walk, passed=passed: [walk(*r) for r in passed], args.repeat)
        result[name] = {
            "lines_walked": len(passed),
            "precheck_mb_s": round(mb / t_check, 1),
            "walk_s": round(t_walk, 4),
            "total_us_per_line": round((t_check + t_walk) / len(corpus) * 1e6, 2),
        }
    redactions = [
        r
        for x, rec in zip(corpus, records, strict=True)
        if may_hold_private(x)
        for r in strip_private(rec)[1]
    ]
    kinds: dict[str, int] = {}
    for r in redactions:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + r["count"]
    result["redactions_by_kind"] = kinds
    if args.import_ab:
        result["import"] = import_ab(args.repeat)
    result["python"] = sys.version.split()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
