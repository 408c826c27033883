"""Regenerate ``projections/data/prices.json`` from LiteLLM's price table.

Source: ``litellm/model_prices_and_context_window_backup.json`` inside the ``litellm``
wheel on PyPI (MIT licence; https://github.com/BerriAI/litellm). Usage::

    pip download litellm --no-deps -d /tmp/litellm-wheel
    python3 scripts/update_prices.py /tmp/litellm-wheel/litellm-*.whl

(a path to the extracted JSON works too; pass ``--version`` then). Standard library
only. The output keeps the coding-agent model families (Anthropic Claude, OpenAI GPT-4.1 /
GPT-4o / GPT-5 / o-series / codex, Google Gemini 2+) at their first-party list prices,
in USD per million tokens, and records the LiteLLM version and the date of the run.

Choice of entries (see docs/cost.md):

1. first party: ``litellm_provider`` ``anthropic``, ``openai``, ``gemini`` (Google AI
   Studio) and ``vertex_ai-language-models`` (Gemini on Vertex, same list price),
   ``mode`` chat or responses;
2. for models LiteLLM no longer lists first-party (retired Claude releases such as
   ``claude-sonnet-4-20250514``): the region-less Bedrock entry
   ``anthropic.<model>-v<n>:0`` (Bedrock's on-demand price equals Anthropic's list
   price for these), then ``vertex_ai/<model>@<date>`` (and ``vertex_ai/gemini-*`` for
   Gemini models Google AI Studio no longer lists);
3. an undated alias (``claude-sonnet-4``) is added for a dated name when every dated
   entry of that base name has the same prices.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "projections" / "data" / "prices.json"
MEMBER = "litellm/model_prices_and_context_window_backup.json"

FIRST_PARTY = {
    "anthropic": "anthropic",
    "openai": "openai",
    "gemini": "google",
    "vertex_ai-language-models": "google",
}
FAMILIES = re.compile(r"^(claude-|gpt-4\.1|gpt-4o|gpt-5|o1|o3|o4-mini|codex-mini|gemini-[2-9])")
NOT_TEXT = re.compile(
    r"(audio|realtime|tts|transcribe|image|search|live|native|robotics|deep-research"
    r"|computer-use|customtools|embedding)"
)
# Entries known to be wrong upstream: there is no Claude 3.7 Sonnet of 2024-06-20
# (the release is 20250219); its price differs from the real one and would make the
# undated alias ``claude-3-7-sonnet`` ambiguous.
VERTEX = ("vertex_ai-anthropic_models", "vertex_ai")
DENY = {"anthropic.claude-3-7-sonnet-20240620-v1:0"}
BEDROCK = re.compile(r"^anthropic\.(claude-[a-z0-9.-]+?)-v\d+:\d+$")
DATED = re.compile(r"^(.*?)(?:-\d{8}|-\d{4}-\d{2}-\d{2})$")
FIELDS = {
    "input": "input_cost_per_token",
    "output": "output_cost_per_token",
    "cache_read": "cache_read_input_token_cost",
    "cache_write": "cache_creation_input_token_cost",
    "cache_write_1h": "cache_creation_input_token_cost_above_1hr",
}


def per_million(v: object) -> float | None:
    if v is None:
        return None
    return round(float(v) * 1_000_000, 6)  # type: ignore[arg-type]


TIER = re.compile(
    r"^(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost"
    r"|cache_creation_input_token_cost)_above_(\d+)k_tokens$"
)


def long_context(spec: dict) -> dict | None:
    """Standard-tier prices for a prompt above ``tokens`` (LiteLLM ``*_above_<N>k_tokens``;
    flex, batch, priority and TTL variants are left out)."""
    field = {v: k for k, v in FIELDS.items()}
    tiers: dict[int, dict] = {}
    for key, value in spec.items():
        if (m := TIER.match(key)) and value is not None:
            tiers.setdefault(int(m.group(2)) * 1000, {})[field[m.group(1)]] = per_million(value)
    if not tiers:
        return None
    threshold = min(tiers)
    return {"tokens": threshold, **dict(sorted(tiers[threshold].items()))}


def price_entry(key: str, spec: dict, provider: str) -> dict | None:
    entry: dict = {f: per_million(spec.get(k)) for f, k in FIELDS.items()}
    if entry["input"] is None or entry["output"] is None:
        return None
    entry = {k: v for k, v in entry.items() if v is not None}
    if tier := long_context(spec):
        entry["above"] = tier
    entry["provider"] = provider
    entry["litellm_key"] = key
    return entry


def select(table: dict) -> dict[str, dict]:
    """Our subset of LiteLLM's table, keyed by model name (lower case, no prefix)."""
    out: dict[str, dict] = {}
    fallbacks: list[tuple[str, str, dict]] = []
    for key, spec in table.items():
        if not isinstance(spec, dict) or key in DENY:
            continue
        if spec.get("mode") not in ("chat", "responses"):
            continue
        provider = spec.get("litellm_provider")
        if provider in FIRST_PARTY:
            name = key.lower().removeprefix("gemini/")
            if "/" in name or not FAMILIES.match(name) or NOT_TEXT.search(name):
                continue
            entry = price_entry(key, spec, FIRST_PARTY[provider])
            # Google AI Studio first, Vertex second (same list prices).
            if entry and (name not in out or provider == "gemini"):
                out[name] = entry
        elif provider in ("bedrock", "bedrock_converse") and (m := BEDROCK.match(key)):
            fallbacks.append((m.group(1), key, spec))
        elif provider in VERTEX and key.startswith("vertex_ai/"):
            name = key.removeprefix("vertex_ai/").replace("@", "-")
            # Claude on Vertex: dated releases only (undated Vertex names may carry
            # Vertex's own price; the undated alias is derived from the dated ones).
            dated = DATED.match(name) is not None
            if FAMILIES.match(name) and not NOT_TEXT.search(name) and (
                dated or name.startswith("gemini")
            ):
                fallbacks.append((name, key, spec))
    for name, key, spec in fallbacks:  # Bedrock entries come first in LiteLLM's file
        if name not in out:
            provider = "anthropic" if name.startswith("claude") else "google"
            entry = price_entry(key, spec, provider)
            if entry:
                out[name] = entry
    _add_undated_aliases(out)
    return dict(sorted(out.items()))


def _add_undated_aliases(out: dict[str, dict]) -> None:
    groups: dict[str, list[str]] = {}
    for name in out:
        if m := DATED.match(name):
            groups.setdefault(m.group(1), []).append(name)
    for base, names in groups.items():
        if base in out:
            continue
        prices = {json.dumps({k: out[n].get(k) for k in (*FIELDS, "above")}) for n in names}
        if len(prices) == 1:
            latest = max(names)
            out[base] = {**out[latest], "alias_of": latest}


def load(path: Path) -> tuple[dict, str | None]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            table = json.loads(z.read(MEMBER))
        m = re.match(r"litellm-([^-]+)-", path.name)
        return table, m.group(1) if m else None
    return json.loads(path.read_text()), None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="litellm wheel (.whl) or the extracted JSON")
    p.add_argument("--version", help="litellm version (read from the wheel name if omitted)")
    p.add_argument("--date", help="retrieval date YYYY-MM-DD (default: today, UTC)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    table, wheel_version = load(args.source)
    version = args.version or wheel_version
    if not version:
        p.error("--version is required when the source is not a wheel")
    date = args.date or datetime.now(UTC).date().isoformat()
    models = select(table)
    doc = {
        "version": f"litellm-{version}@{date}",
        "source": {
            "name": "LiteLLM model_prices_and_context_window_backup.json",
            "package": f"litellm=={version} (PyPI wheel)",
            "url": "https://github.com/BerriAI/litellm/blob/main/model_prices_and_context_window.json",
            "license": "MIT",
            "retrieved": date,
            "generator": "scripts/update_prices.py",
        },
        "unit": "USD per million tokens",
        "fields": {
            "input": "input tokens, cache reads excluded",
            "output": "output tokens, reasoning/thinking included",
            "cache_read": "cache read (hit) tokens",
            "cache_write": "cache creation tokens, 5-minute TTL write where the provider has TTLs",
            "cache_write_1h": "cache creation tokens with a 1-hour TTL (Anthropic)",
            "above": "prices for a request whose prompt (input + cache read + cache write)"
            " exceeds `tokens`; fields absent there keep the base price",
        },
        "models": models,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{args.out}: {len(models)} models, version {doc['version']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
