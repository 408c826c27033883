"""Reference token totals from the third-party tool ccusage (npm ``ccusage``).

Used by tests to cross-check our Claude Code transcript parser.  Two ways in:

* ``RECORDED_PATH`` -- a checked-in JSON (``tests/data/ccusage_expected.json``)
  produced by ``python tests/ccusage_ref.py --write``; no ccusage needed.
* ``run_ccusage(fixture_root, workdir)`` -- re-run ccusage live (returns None
  when no ccusage binary is found; install one with
  ``tests/tools/install_ccusage.sh``).

Both have the shape::

    {fixture_relpath: {session_key: {"input_tokens": int, "output_tokens": int,
                                     "cache_creation_input_tokens": int,
                                     "cache_read_input_tokens": int}}}

(the recorded file has an extra top-level ``"_meta"`` entry).

How ccusage is run: every fixture file gets its *own* CLAUDE_CONFIG_DIR with a
single project (``projects/<relpath with "/" -> "__", suffix dropped>/``) and
ccusage is invoked once per fixture, so neither sessions nor ccusage's
message-id dedup can cross files.  ``session_key`` is what ccusage reports as
``sessionId``: the *file name stem* of the transcript in the layout (e.g.
``short`` for ``short.jsonl``, ``chat`` for a converted ``chat.json``), not the
``sessionId`` field of the records.  A main transcript whose sibling
``<stem>/subagents/agent-*.jsonl`` folder exists is laid out with that folder,
and ccusage adds the subagent usage into the main file's session; each
subagent file is additionally reported on its own under its own relpath.
See ``tests/data/CCUSAGE_NOTES.md`` for where ccusage differs from a plain
"dedupe by message.id" count and why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE_ROOT = HERE / "fixtures"
RECORDED_PATH = HERE / "data" / "ccusage_expected.json"
TOOLS_BIN = HERE.parent / ".tools" / "ccusage" / "node_modules" / ".bin" / "ccusage"
CCUSAGE_VERSION = "20.0.24"
CCUSAGE_ARGS = ["claude", "session", "--json", "--offline"]

TOKEN_FIELDS = {
    # ccusage JSON name -> our (Anthropic usage) name
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheCreationTokens": "cache_creation_input_tokens",
    "cacheReadTokens": "cache_read_input_tokens",
}

# Claude Code transcripts (JSONL), relative to the fixture root.  Globs.
JSONL_GLOBS = [
    "spotter-claude-transcripts/*.jsonl",
    "spotter-claude-transcripts/*/subagents/agent-*.jsonl",
    "agentcmd-claude-transcripts/*.jsonl",
    "agent-sessions-schema-drift/claude_*.jsonl",
    "agent-sessions-schema-drift/claude_subagent/*.jsonl",
    "agent-sessions-schema-drift/claude_subagent/*/subagents/agent-*.jsonl",
    "claude-code-log-fixtures/*.jsonl",
]
# Claude Code transcripts stored as one JSON array; converted to JSONL.
JSON_ARRAY_FILES = [
    "attio-mcp-server-hook-logs/chat.json",
    "coorp-serverless-plugins-hook-logs/4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe/chat.json",
]


def find_ccusage() -> str | None:
    """CCUSAGE_BIN, then .tools/ccusage/node_modules/.bin/ccusage, then PATH."""
    env = os.environ.get("CCUSAGE_BIN")
    if env and Path(env).is_file() and os.access(env, os.X_OK):
        return env
    if TOOLS_BIN.is_file() and os.access(TOOLS_BIN, os.X_OK):
        return str(TOOLS_BIN)
    return shutil.which("ccusage")


def fixture_files(fixture_root: Path) -> list[str]:
    """Relative paths (posix) of all Claude transcripts covered, sorted."""
    rels: set[str] = set()
    for pattern in JSONL_GLOBS:
        for p in fixture_root.glob(pattern):
            if p.is_file():
                rels.add(p.relative_to(fixture_root).as_posix())
    for rel in JSON_ARRAY_FILES:
        if (fixture_root / rel).is_file():
            rels.add(rel)
    return sorted(rels)


def project_name(relpath: str) -> str:
    return relpath.rsplit(".", 1)[0].replace("/", "__")


def json_array_to_jsonl(src: Path, dst: Path) -> None:
    records = json.loads(src.read_text(encoding="utf-8"))
    with dst.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")


def build_layout(fixture_root: Path, relpath: str, config_dir: Path) -> Path:
    """Lay one fixture file out as ``config_dir/projects/<project>/<stem>.jsonl``."""
    src = fixture_root / relpath
    proj = config_dir / "projects" / project_name(relpath)
    proj.mkdir(parents=True, exist_ok=True)
    stem = src.name.rsplit(".", 1)[0]
    dst = proj / f"{stem}.jsonl"
    if src.suffix == ".json":
        json_array_to_jsonl(src, dst)
    else:
        shutil.copyfile(src, dst)
    sub = src.parent / stem / "subagents"
    if src.suffix == ".jsonl" and sub.is_dir():
        shutil.copytree(sub, proj / stem / "subagents")
    return dst


def ccusage_env(home: Path, config_dir: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TZ": "UTC",
        "NO_COLOR": "1",
        "CLAUDE_CONFIG_DIR": str(config_dir),
    }


def _run_one(binary: str, config_dir: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="ccusage-home-") as home:
        proc = subprocess.run(
            [binary, *CCUSAGE_ARGS],
            cwd=home,
            env=ccusage_env(Path(home), config_dir),
            capture_output=True,
            text=True,
            timeout=120,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ccusage failed ({proc.returncode}): {proc.stderr.strip()}")
    out: dict = {}
    for sess in json.loads(proc.stdout)["sessions"]:
        out[sess["sessionId"]] = {ours: int(sess.get(theirs) or 0) for theirs, ours in TOKEN_FIELDS.items()}
    return out


def ccusage_version(binary: str) -> str:
    with tempfile.TemporaryDirectory(prefix="ccusage-home-") as home:
        proc = subprocess.run(
            [binary, "--version"], cwd=home, env=ccusage_env(Path(home), Path(home)),
            capture_output=True, text=True, timeout=60,
        )
    return proc.stdout.strip()


def run_ccusage(fixture_root: Path, workdir: Path) -> dict | None:
    """Run ccusage on every covered fixture; None if no ccusage binary is found."""
    binary = find_ccusage()
    if binary is None:
        return None
    fixture_root = Path(fixture_root)
    workdir = Path(workdir)
    result: dict = {}
    for i, rel in enumerate(fixture_files(fixture_root)):
        config_dir = workdir / f"cfg{i:02d}"
        build_layout(fixture_root, rel, config_dir)
        result[rel] = _run_one(binary, config_dir)
    return result


def load_recorded() -> dict:
    data = json.loads(RECORDED_PATH.read_text(encoding="utf-8"))
    data.pop("_meta", None)
    return data


def _write_recorded() -> int:
    binary = find_ccusage()
    if binary is None:
        print("no ccusage found; run tests/tools/install_ccusage.sh", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="ccusage-ref-") as tmp:
        data = run_ccusage(FIXTURE_ROOT, Path(tmp))
    assert data is not None
    meta = {
        "ccusage_version": ccusage_version(binary),
        "npm_package": f"ccusage@{CCUSAGE_VERSION}",
        "command": "env -i PATH=$PATH HOME=<empty tmp dir> TZ=UTC NO_COLOR=1 "
        "CLAUDE_CONFIG_DIR=<tmp>/cfgNN ccusage " + " ".join(CCUSAGE_ARGS) + " (cwd=<empty tmp dir>)",
        "layout": "one CLAUDE_CONFIG_DIR and one ccusage run per fixture file: "
        "<cfg>/projects/<relpath, '/'->'__', suffix dropped>/<stem>.jsonl "
        "(+ <stem>/subagents/ copied when present beside the fixture); "
        "JSON-array chat.json converted to JSONL with json.dumps(rec, separators=(',', ':'))",
        "keys": "session key = ccusage sessionId = file stem in the layout; values from "
        "inputTokens/outputTokens/cacheCreationTokens/cacheReadTokens",
        "generated_by": "python tests/ccusage_ref.py --write",
        "notes": "tests/data/CCUSAGE_NOTES.md",
    }
    out = {"_meta": meta, **data}
    RECORDED_PATH.parent.mkdir(parents=True, exist_ok=True)
    RECORDED_PATH.write_text(json.dumps(out, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {RECORDED_PATH}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        sys.exit(_write_recorded())
    with tempfile.TemporaryDirectory(prefix="ccusage-ref-") as tmp:
        res = run_ccusage(FIXTURE_ROOT, Path(tmp))
    print(json.dumps(res, indent=2))
