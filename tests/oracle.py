"""Independent oracle for Claude Code transcripts (deliberately simple, stdlib only).

A second implementation of the agreed counting rules, used by tests to check
the real parser. It must not import anything from ledger/, projections/ or api/.

Rules, implemented literally:

1. Lines. The file is read as bytes and split on b"\\n". Empty/whitespace lines
   are ignored. A line that is not valid UTF-8 JSON, or is JSON but not an
   object, is counted as rejected (reported under the key "__rejected__").
   A *.json file is a JSON array of records instead; non-object elements are
   rejected the same way.
2. A record whose `uuid` was already seen earlier in the file is skipped
   (first wins).
3. Session key. Records without `sessionId` are ignored. The key is
   `sessionId`; with `agentId` it is f"{sessionId}/agent-{agentId}"; with
   `isSidechain: true` and no `agentId` it is
   f"{sessionId}/sidechain-{root_uuid}", where the root is found by following
   `parentUuid` links (within the file) until parentUuid is null or unknown.
   A record whose `sessionId` is its own run's f"agent-{agentId}" (schema drift) in
   a file `<parent>/subagents/agent-*.jsonl` takes `<parent>` as its sessionId.
4. Human prompts: type == "user", not isMeta, not isCompactSummary,
   message.content is a string or a list without a tool_result block. Text
   parts are the string itself or the `text` of each text block; parts whose
   lstrip() starts with one of SYNTHETIC_PREFIXES are dropped; records with
   origin.kind == "task-notification" are not prompts (FORMATS.md C15). If a non-empty
   part remains, the record is a prompt with text "\\n".join(remaining parts).
   Else, a record whose text (the parts joined by "\\n") starts, after lstrip(), with
   "<command-message>" is a prompt command the model answers (Claude Code writes a
   local command with "<command-name>" first): a prompt with text "/name", plus " "
   and the stripped <command-args> text when that is not empty (name: the stripped
   <command-name> text).
5. Tool calls: distinct ids of tool_use blocks in assistant message.content.
6. Tokens: assistant records grouped by message.id, the last record in file
   order wins; the four usage fields are summed (missing/null -> 0). Assistant
   records without message.id count individually.
"""
import json
from collections import defaultdict
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"

TOKEN_FIELDS = ("input_tokens", "output_tokens",
                "cache_creation_input_tokens", "cache_read_input_tokens")

SYNTHETIC_PREFIXES = ("<command-name>", "<command-message>", "<command-args>",
                      "<local-command-stdout>", "<local-command-stderr>",
                      "<system-reminder>", "<task-notification>", "Caveat:",
                      "[Request interrupted")

_GLOBS = ("spotter-claude-transcripts/**/*.jsonl",
          "agentcmd-claude-transcripts/**/*.jsonl",
          "agent-sessions-schema-drift/claude_*.jsonl",
          "agent-sessions-schema-drift/claude_subagent/**/*.jsonl",
          "claude-code-log-fixtures/*.jsonl")
_JSON_ARRAY_FILES = ("attio-mcp-server-hook-logs/chat.json",
                     "coorp-serverless-plugins-hook-logs/"
                     "4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe/chat.json")

# Paths relative to FIXTURES, sorted.
TRANSCRIPT_FILES = sorted(
    {p.relative_to(FIXTURES).as_posix() for g in _GLOBS for p in FIXTURES.glob(g)}
    | set(_JSON_ARRAY_FILES))


def read_records(path):
    """Return (records, rejected) for a JSONL file or a *.json array file (rule 1)."""
    data = Path(path).read_bytes()
    if Path(path).suffix == ".json":
        items = json.loads(data)
    else:
        items = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line.decode("utf-8")))
            except ValueError:  # UnicodeDecodeError and JSONDecodeError
                items.append(None)  # becomes a rejected non-object
    records = [r for r in items if isinstance(r, dict)]
    return records, len(items) - len(records)


def dedupe(records):
    """Rule 2: drop records whose uuid was already seen (first wins)."""
    seen, out = set(), []
    for rec in records:
        uuid = rec.get("uuid")
        if uuid is not None:
            if uuid in seen:
                continue
            seen.add(uuid)
        out.append(rec)
    return out


def session_key(rec, by_uuid, folder_session=None):
    """Rule 3: the session key of a record, or None if it has no sessionId.
    `folder_session`: <parent> of a file <parent>/subagents/agent-*.jsonl."""
    sid = rec.get("sessionId")
    if sid is None:
        return None
    if rec.get("agentId") is not None:
        if folder_session and sid == f"agent-{rec['agentId']}":
            sid = folder_session
        return f"{sid}/agent-{rec['agentId']}"
    if rec.get("isSidechain") is True:
        root, visited = rec, set()
        while root.get("parentUuid") in by_uuid and root["parentUuid"] not in visited:
            visited.add(root["parentUuid"])
            root = by_uuid[root["parentUuid"]]
        return f"{sid}/sidechain-{root.get('uuid')}"
    return sid


def prompt_text(rec):
    """Rule 4: the human prompt text of a record, or None if it is not one."""
    if rec.get("type") != "user" or rec.get("isMeta") is True \
            or rec.get("isCompactSummary") is True:
        return None
    origin = rec.get("origin")
    if isinstance(origin, dict) and origin.get("kind") == "task-notification":
        return None  # FORMATS.md C15: task notifications are not typed by a human
    content = (rec.get("message") if isinstance(rec.get("message"), dict) else {}).get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        if any(b.get("type") == "tool_result" for b in blocks):
            return None
        parts = [b.get("text") for b in blocks if b.get("type") == "text"]
        parts = [p for p in parts if isinstance(p, str)]
    else:
        return None
    human = [p for p in parts if not p.lstrip().startswith(SYNTHETIC_PREFIXES)]
    if any(human):
        return "\n".join(human)
    joined = "\n".join(parts)
    if not joined.lstrip().startswith("<command-message>") or "<command-name>" not in joined:
        return None
    name = joined.split("<command-name>", 1)[1].split("</command-name>", 1)[0].strip()
    args = ""
    if "<command-args>" in joined:
        args = joined.split("<command-args>", 1)[1].split("</command-args>", 1)[0].strip()
    return name + (" " + args if args else "")


def count_transcript(path):
    """Count prompts, tool calls and tokens per session key of one transcript.

    Returns {session_key: {"prompts", "prompt_count", "tool_call_ids",
    "tool_call_count", <4 token fields>}, "__rejected__": int}.
    """
    path = Path(path)
    if not path.exists():
        path = FIXTURES / path
    records, rejected = read_records(path)
    records = dedupe(records)
    by_uuid = {r["uuid"]: r for r in records if r.get("uuid") is not None}
    folder_session = None
    if path.name.startswith("agent-") and path.parent.name == "subagents":
        folder_session = path.parent.parent.name

    prompts = defaultdict(list)
    tool_ids = defaultdict(set)
    usage_by_msg = defaultdict(dict)  # key -> {message id or record index: usage}
    keys = []  # session keys in order of first appearance

    for i, rec in enumerate(records):
        key = session_key(rec, by_uuid, folder_session)
        if key is None:
            continue
        if key not in keys:
            keys.append(key)
        text = prompt_text(rec)
        if text is not None:
            prompts[key].append(text)
        msg = rec.get("message") if isinstance(rec.get("message"), dict) else {}
        if rec.get("type") == "assistant":
            content = msg.get("content") if isinstance(msg.get("content"), list) else []
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use" \
                        and block.get("id") is not None:
                    tool_ids[key].add(block["id"])
            msg_id = msg.get("id")
            usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else {}
            usage_by_msg[key][("id", msg_id) if msg_id is not None else ("rec", i)] = usage

    result = {}
    for key in keys:
        counts = {"prompts": prompts[key], "prompt_count": len(prompts[key]),
                  "tool_call_ids": sorted(tool_ids[key]),
                  "tool_call_count": len(tool_ids[key])}
        for field in TOKEN_FIELDS:
            counts[field] = sum(u.get(field) or 0 for u in usage_by_msg[key].values())
        result[key] = counts
    result["__rejected__"] = rejected
    return result


def main():
    cols = ("prompts", "tools", "input", "output", "cache_create", "cache_read")
    print(f"{'file / session':<78} " + " ".join(f"{c:>12}" for c in cols))
    for rel in TRANSCRIPT_FILES:
        res = count_transcript(FIXTURES / rel)
        print(f"{rel}  (rejected lines: {res['__rejected__']})")
        for key, c in res.items():
            if key == "__rejected__":
                continue
            vals = (c["prompt_count"], c["tool_call_count"], *(c[f] for f in TOKEN_FIELDS))
            print(f"  {key:<76} " + " ".join(f"{v:>12}" for v in vals))


if __name__ == "__main__":
    main()
