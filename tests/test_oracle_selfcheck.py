"""Self-checks of tests/oracle.py against numbers verified by hand (jq/grep).

The expected values below were derived from the fixture files directly, e.g.
  jq -c '[input_line_number, .type, .message.id, .message.usage]' short.jsonl
  jq -s '[.[]|select(.type=="assistant")] | group_by(.message.id)
         | map(last.message.usage) | map(.output_tokens) | add' tool_heavy.jsonl
not by running the oracle.
"""
import json

import pytest

from oracle import FIXTURES, TRANSCRIPT_FILES, count_transcript

TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens",
          "cache_read_input_tokens")


def tokens(counts):
    return tuple(counts[f] for f in TOKENS)


def sessions(result):
    return {k: v for k, v in result.items() if k != "__rejected__"}


def test_transcript_files_selection():
    assert len(TRANSCRIPT_FILES) == 23
    assert ("spotter-claude-transcripts/258c7280-ae70-4798-800f-63464d01a85d"
            "/subagents/agent-acompact-fffbd0.jsonl") in TRANSCRIPT_FILES
    assert "attio-mcp-server-hook-logs/chat.json" in TRANSCRIPT_FILES
    assert not any("codex" in f or "gemini" in f or "cursor" in f or "openclaw" in f
                   or "stream-json" in f for f in TRANSCRIPT_FILES)
    assert all((FIXTURES / f).is_file() for f in TRANSCRIPT_FILES)


def test_short_one_message_id_split_over_five_records():
    # Lines 5-8 and 10 are assistant records sharing msg_01MKH1ccEGrZGNPvu8pYiiQa,
    # each repeating usage (3, 13, 13835, 11515); line 13 is an interrupt marker.
    res = count_transcript("spotter-claude-transcripts/short.jsonl")
    assert res["__rejected__"] == 0
    assert list(sessions(res)) == ["55604662-cf2a-4331-851a-ec234028f8ca"]
    s = res["55604662-cf2a-4331-851a-ec234028f8ca"]
    assert s["prompts"] == ["mix phx.server doesnt seem to start"]
    assert s["prompt_count"] == 1
    assert s["tool_call_ids"] == ["toolu_0116Hyi5v8ut7Ffb7d8qV1Sc",
                                  "toolu_01FdQ8qTyVyZjE3Kw4dguQGx"]
    assert s["tool_call_count"] == 2
    assert tokens(s) == (3, 13, 13835, 11515)


def test_last_record_of_a_message_id_wins():
    # tool_heavy.jsonl lines 34 and 37 share msg_019BN3FRqb7NU4DgBN5jdsym with
    # output_tokens 25 then 173; 4 distinct message ids, 6 tool_use ids.
    s = count_transcript("spotter-claude-transcripts/tool_heavy.jsonl")[
        "d6e0bada-1959-4eec-a9d2-0bfade768d8f"]
    assert tokens(s) == (54, 212, 17696, 88231)
    assert s["tool_call_count"] == 6
    assert s["prompts"][0] == "start phoenix in background"
    assert s["prompt_count"] == 2


def test_a_prompt_command_is_a_prompt():
    # A single user record whose string content starts with <command-message>: a prompt
    # command (/generate-feature "a" "b"), the model answers it (rule 4).
    res = count_transcript("agentcmd-claude-transcripts/user-slash-command-with-args.jsonl")
    assert res["__rejected__"] == 0
    s = res["33ae3837-255e-4ccf-aea4-90e8bf675372"]
    assert s["prompts"] == ['/generate-feature "a" "b"'] and s["tool_call_count"] == 0
    assert tokens(s) == (0, 0, 0, 0)


def test_malformed_lines():
    res = count_transcript("claude-code-log-fixtures/edge_cases.SYNTHETIC_malformed.jsonl")
    # lines 13 "massive error", 15 42, 16 [1]; line 14 {"silly": "this"} is an object
    assert res["__rejected__"] == 3
    assert set(sessions(res)) == {"edge_cases", "todowrite_session"}
    s = res["edge_cases"]
    # edge_001 and edge_003 are prompts; edge_006/007/008 are Caveat/command/stdout;
    # line 11 (edge_011, message "error") wins over the real prompt on line 12.
    assert s["prompt_count"] == 2
    assert s["prompts"][0].startswith("Here's a message with some **markdown**")
    assert s["prompts"][1].startswith("Let's test a very long message")
    assert s["tool_call_ids"] == ["tool_edge_001", "tool_edge_002"]
    assert tokens(s) == (35 + 200 + 85, 145 + 25 + 180, 0, 0)
    t = res["todowrite_session"]
    assert t["tool_call_ids"] == ["toolu_todowrite_002"]
    assert tokens(t) == (168, 85, 0, 0) and t["prompts"] == []


def test_inline_sidechain_and_agent_file():
    # claude_small.jsonl: lines 1-22 are isSidechain:true with root "sys1";
    # line 29 (isSidechain false, msg_stage0_1, usage 10/5) is the main session.
    res = count_transcript("agent-sessions-schema-drift/claude_small.jsonl")
    assert res["ses_stage0_small/sidechain-sys1"]["prompts"] == ["Hello"]
    main = res["ses_stage0_small"]
    assert main["prompts"] == [] and main["tool_call_ids"] == ["toolu_stage0_1"]
    assert tokens(main) == (10, 5, 0, 0)
    # 2.x subagent file: key is f"{sessionId}/agent-{agentId}"
    res = count_transcript("spotter-claude-transcripts/258c7280-ae70-4798-800f-63464d01a85d"
                           "/subagents/agent-a881341.jsonl")
    assert list(sessions(res)) == ["258c7280-ae70-4798-800f-63464d01a85d/agent-a881341"]
    # a subagent file whose records give sessionId "agent-<agentId>": its folder's session
    res = count_transcript("agent-sessions-schema-drift/claude_subagent/0a1b2c3d-4e5f-4061-"
                           "8071-2a3b4c5d6e7f/subagents/agent-a0ad4f44468bdf20d.jsonl")
    assert list(sessions(res)) == [
        "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f/agent-a0ad4f44468bdf20d"
    ]


def test_json_array_transcripts_match_jq():
    # jq '[.[]|select(.type=="assistant")] | group_by(.message.id) | map(last.message.usage)'
    s = count_transcript("attio-mcp-server-hook-logs/chat.json")[
        "8664c04e-75fa-497d-ac11-57d69997e3ec"]
    assert tokens(s) == (62, 5899, 72599, 1912994)
    s = count_transcript("coorp-serverless-plugins-hook-logs/4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"
                         "/chat.json")["4f65f198-0c0c-47a2-b6ab-5f2e30ae5cbe"]
    assert tokens(s) == (26091, 150479, 457026, 15172643)
    assert s["prompt_count"] == 3  # `/prime …` (a prompt command) and two typed prompts
    assert s["prompts"][0].startswith("/prime & read ")


def write_jsonl(path, records, extra_lines=()):
    lines = [json.dumps(r).encode() for r in records] + list(extra_lines)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_synthetic_rules(tmp_path):
    def user(uuid, parent, content, **kw):
        return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": "S",
                "message": {"role": "user", "content": content}, **kw}

    def asst(uuid, parent, msg_id, blocks, usage, **kw):
        return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": "S",
                "message": {"id": msg_id, "content": blocks, "usage": usage}, **kw}

    tool = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}
    records = [
        user("u1", None, [{"type": "text", "text": "  <system-reminder>x"},
                          {"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]),
        asst("a1", "u1", "m1", [tool], {"input_tokens": 1, "output_tokens": 1}),
        asst("a2", "a1", "m1", [tool], {"input_tokens": 1, "output_tokens": 9,
                                        "cache_read_input_tokens": None}),
        asst("a3", "a2", None, [], {"input_tokens": 100}),
        asst("a4", "a3", None, [], {"input_tokens": 100}),
        user("u1", None, "duplicate uuid, skipped"),
        user("r1", None, [{"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                          {"type": "text", "text": "not a prompt"}]),
        user("e1", None, [{"type": "text", "text": ""}, {"type": "image", "source": {}}]),
        user("m1", None, "meta text", isMeta=True),
        user("s1", "unknown", "side task", isSidechain=True),
        asst("s2", "s1", "m2", [], {"output_tokens": 4}, isSidechain=True),
        user("c1", None, "child task", agentId="abc"),
        {"type": "summary", "summary": "no sessionId"},
    ]
    res = count_transcript(write_jsonl(tmp_path / "t.jsonl", records,
                                       [b"", b"  \r", b"{bad json", b'"str"', b'{"a": "\xff"}']))
    assert res["__rejected__"] == 3
    assert set(sessions(res)) == {"S", "S/sidechain-s1", "S/agent-abc"}
    assert res["S"]["prompts"] == ["hi\nthere"]
    assert res["S"]["tool_call_ids"] == ["t1"]
    assert tokens(res["S"]) == (201, 9, 0, 0)
    assert res["S/sidechain-s1"]["prompts"] == ["side task"]
    assert res["S/sidechain-s1"]["output_tokens"] == 4
    assert res["S/agent-abc"]["prompts"] == ["child task"]

    arr = tmp_path / "chat.json"
    arr.write_text(json.dumps([records[0], 7, None]))
    res = count_transcript(arr)
    assert res["__rejected__"] == 2 and res["S"]["prompt_count"] == 1


@pytest.mark.parametrize("rel", TRANSCRIPT_FILES)
def test_every_file_parses(rel):
    res = count_transcript(FIXTURES / rel)
    for s in sessions(res).values():
        assert s["prompt_count"] == len(s["prompts"])
        assert s["tool_call_count"] == len(s["tool_call_ids"])
