"""``hookledger run`` against a fake agent that replays a real recorded stream.

``tests/tools/fake_agent.py`` writes a recording (``claude_code-elixir-stream-json``,
``agentcmd-codex-exec-json`` incl. the truncated one) to stdout line by line, then exits
with a chosen status, kills itself with a signal, or cuts its last line. The runner must
record the same ledger as importing the recording (importing it afterwards appends
nothing: same facts, same keys; tool calls and tokens equal the independent counts),
plus the prompt and the outcome: exit 0 -> COMPLETED, error result / non-zero exit /
cut line -> FAILED, signal -> TERMINATED.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from api.bootstrap import Services
from ledger.agent_runner import prompt_from_argv, run_agent
from ledger.importer import import_paths
from projections import queries

from conftest import FIXTURES, cli, resumed_exec_turn, settings_env

FAKE = Path(__file__).parent / "tools" / "fake_agent.py"
TOKENS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
STREAM_JSON = sorted((FIXTURES / "claude_code-elixir-stream-json").glob("*.jsonl"))
CODEX_EXEC = sorted((FIXTURES / "agentcmd-codex-exec-json").glob("*.jsonl"))
TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected(path: Path) -> dict:
    """Independent count over the recording: tool call ids (or item ids) and tokens."""
    records = _records(path)
    if "thread_id" in records[0]:
        # turn.completed carries the thread's running total: the last one counts
        usage = [r["usage"] for r in records if r["type"] == "turn.completed"][-1:]
        tools = {
            r["item"]["id"]
            for r in records
            if r["type"].startswith("item.") and r["item"]["type"] in TOOL_ITEMS
        }
        tokens = {
            "input_tokens": sum(u["input_tokens"] - u["cached_input_tokens"] for u in usage),
            "output_tokens": sum(u["output_tokens"] for u in usage),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": sum(u["cached_input_tokens"] for u in usage),
        }
        return {"tools": len(tools), "tokens": tokens, "session": records[0]["thread_id"]}
    tools = {
        b["id"]
        for r in records
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "tool_use"
    }
    results = [r for r in records if r["type"] == "result"]
    tokens = {t: sum(r["usage"][t] for r in results) for t in TOKENS}
    return {"tools": len(tools), "tokens": tokens, "session": records[0]["session_id"]}


def _run(services: Services, recording: Path, *flags: str, **kw: object):
    out = io.BytesIO()
    outcome = run_agent(
        services.ledger, [sys.executable, str(FAKE), str(recording), *flags], out=out, **kw
    )
    services.runner.catch_up()
    return outcome, out.getvalue()


def _session(services: Services, external_id: str) -> dict:
    (s,) = [s for s in queries.list_sessions(services.models) if s["external_id"] == external_id]
    return s


def _kinds(services: Services, session: dict) -> list[str]:
    return [type(e).__name__ for e in services.ledger.events.get(UUID(session["id"]))]


@pytest.mark.parametrize("recording", STREAM_JSON + CODEX_EXEC, ids=lambda p: p.name)
def test_run_records_the_same_ledger_as_importing_the_recording(
    services: Services, recording: Path
) -> None:
    want = _expected(recording)
    outcome, passed_through = _run(services, recording, prompt="the prompt")
    assert passed_through == recording.read_bytes().rstrip(b"\n") + b"\n"  # output passes through
    assert outcome.outcome == "completed" and outcome.exit_status == 0
    s = _session(services, want["session"])
    assert s["tool_call_count"] == want["tools"]
    assert {t: s[t] for t in TOKENS} == want["tokens"]
    assert s["prompt_count"] == 1  # the prompt from the command line
    assert s["status"] == "COMPLETED"
    before = services.ledger.max_position()
    again = import_paths(services.ledger, [recording])
    assert not again.skipped and again.result.appended == 0  # nothing the run missed
    assert services.ledger.max_position() == before


def test_each_line_is_recorded_as_it_arrives(services: Services) -> None:
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-4.jsonl"
    positions: list[int] = []
    run_agent(
        services.ledger,
        [sys.executable, str(FAKE), str(recording)],
        on_line=lambda _line: positions.append(services.ledger.max_position()),
    )
    assert len(positions) == len(_records(recording))
    assert all(b > a for a, b in itertools.pairwise(positions))  # every line appended at once


def test_non_zero_exit_fails_the_session(services: Services) -> None:
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-1.jsonl"
    outcome, _ = _run(services, recording, "--exit", "3")
    assert (outcome.outcome, outcome.exit_code, outcome.exit_status) == ("failed", 3, 3)
    s = _session(services, _expected(recording)["session"])
    assert s["status"] == "FAILED" and s["ended_at"] is not None


def test_signal_terminates_the_session(services: Services) -> None:
    recording = FIXTURES / "claude_code-elixir-stream-json" / "read_file.jsonl"
    outcome, _ = _run(services, recording, "--signal", "SIGKILL")
    assert (outcome.outcome, outcome.signal, outcome.exit_status) == ("terminated", 9, 137)
    assert _session(services, _expected(recording)["session"])["status"] == "TERMINATED"


def test_truncated_codex_stream_keeps_what_arrived(services: Services) -> None:
    # The real capture stops after turn.started; here the process is then terminated.
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-multi-1.TRUNCATED.jsonl"
    outcome, _ = _run(services, recording, "--signal", "SIGTERM")
    assert outcome.outcome == "terminated"
    s = _session(services, _records(recording)[0]["thread_id"])
    assert s["status"] == "TERMINATED"
    kinds = _kinds(services, s)
    assert kinds.count("Started") == 1 and kinds.count("RecordObserved") == 1  # turn.started kept
    assert import_paths(services.ledger, [recording]).result.appended == 0


@pytest.mark.parametrize(
    "recording",
    [CODEX_EXEC[-1], *STREAM_JSON[:1]],
    ids=lambda p: p.name,
)
def test_the_stream_start_does_not_make_a_working_session_look_idle(
    services: Services, recording: Path
) -> None:
    # Review finding (hookledger run -- codex exec "…"): the run's prompt was recorded
    # before the stream's first line (thread.started / system/init), whose Started moved
    # the session from PROCESSING back to ACTIVE: the live view showed an idle session
    # while the agent worked on the prompt, until its first item arrived.
    _run(services, recording, "--signal", "SIGTERM", prompt="the prompt")
    first = _records(recording)[0]
    s = _session(services, first.get("thread_id") or first.get("session_id"))
    detail = queries.get_session(services.models, s["id"])
    assert detail is not None
    causes = [(h["to_status"], h["cause"]) for h in detail["status_history"]]
    assert causes[:3] == [("CREATED", "Opened"), ("ACTIVE", "Started"), ("PROCESSING", "PromptSubmitted")]
    assert ("ACTIVE", "Started") not in causes[3:]
    assert s["prompt_count"] == 1
    assert import_paths(services.ledger, [recording]).result.appended == 0


def test_codex_exec_resume_is_not_counted_twice(services: Services, tmp_path: Path) -> None:
    # Review finding (hookledger run -- codex exec, then codex exec resume of its thread):
    # the resumed process's turn.completed, the thread's running total, was recorded
    # whole, counting turn 1 twice. Now the session holds the thread's last total.
    first, second, total = resumed_exec_turn(tmp_path)
    _run(services, first)
    _run(services, second)
    s = _session(services, _records(first)[0]["thread_id"])
    assert {t: s[t] for t in TOKENS} == {
        "input_tokens": total["input_tokens"] - total["cached_input_tokens"],
        "output_tokens": total["output_tokens"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": total["cached_input_tokens"],
    }
    assert s["status"] == "COMPLETED"
    # the same keys as an import: importing both recordings appends nothing
    assert import_paths(services.ledger, [first, second]).result.appended == 0


def test_error_result_fails_the_session(services: Services, tmp_path: Path) -> None:
    # The real simple_hello stream with its result turned into an error result.
    lines = (
        (FIXTURES / "claude_code-elixir-stream-json" / "simple_hello.jsonl")
        .read_text()
        .splitlines()
    )
    result = json.loads(lines[-1])
    result.update(subtype="error_max_turns", is_error=True)
    recording = tmp_path / "error_result.jsonl"
    recording.write_text("\n".join([*lines[:-1], json.dumps(result)]) + "\n")
    outcome, _ = _run(services, recording)
    assert (outcome.outcome, outcome.exit_code, outcome.reason) == (
        "failed",
        0,
        "result:error_max_turns",
    )
    assert _session(services, result["session_id"])["status"] == "FAILED"


def test_session_end_after_a_failed_run_keeps_it_failed(services: Services, tmp_path: Path) -> None:
    # The run's error result fails the session; Claude's SessionEnd hook fires as the
    # process exits and arrives after it. Before, it turned FAILED into COMPLETED.
    from ledger.ingest import ingest_hook

    lines = (FIXTURES / "claude_code-elixir-stream-json" / "error_case.jsonl").read_text().splitlines()
    result = json.loads(lines[-1])
    result.update(subtype="error_during_execution", is_error=True)
    recording = tmp_path / "error_result.jsonl"
    recording.write_text("\n".join([*lines[:-1], json.dumps(result)]) + "\n")
    outcome, _ = _run(services, recording)
    assert outcome.outcome == "failed"
    failed = _session(services, result["session_id"])
    assert failed["status"] == "FAILED"
    end = {"session_id": result["session_id"], "cwd": "/tmp", "hook_event_name": "SessionEnd",
           "reason": "other"}
    assert ingest_hook(services.ledger, "claude-code", json.dumps(end).encode(), "end-1").error is None
    services.runner.catch_up()
    s = _session(services, result["session_id"])
    assert s["status"] == "FAILED" and s["ended_at"] is not None
    events = list(services.ledger.events.get(UUID(s["id"])))
    assert (type(events[-1]).__name__, events[-1].status.value) == ("Ended", "FAILED")
    detail = queries.get_session(services.models, s["id"])
    assert detail is not None
    history = [(h["from_status"], h["to_status"], h["cause"]) for h in detail["status_history"]]
    assert history[-1][1:] == ("FAILED", "RunEnded")  # the SessionEnd adds no transition
    # new activity still reopens it, naming the state it found
    prompt = {**end, "hook_event_name": "UserPromptSubmit", "prompt": "try again"}
    ingest_hook(services.ledger, "claude-code", json.dumps(prompt).encode(), "p-2")
    reopened = [e for e in services.ledger.events.get(UUID(s["id"])) if type(e).__name__ == "Reopened"]
    assert [e.from_status.value for e in reopened] == ["FAILED"]


def test_stream_cut_mid_line_keeps_everything_and_records_the_cut(services: Services) -> None:
    recording = FIXTURES / "claude_code-elixir-stream-json" / "error_case.jsonl"
    records = _records(recording)
    outcome, _ = _run(services, recording, "--cut")
    assert outcome.stream_cut and outcome.outcome == "failed"
    assert outcome.recorded.rejected == 1  # the half line, kept with its reason
    s = _session(services, records[0]["session_id"])
    assert s["status"] == "FAILED"
    # everything before the cut (the result line) is there: tool calls and streamed usage
    tools = {
        b["id"]
        for r in records
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b["type"] == "tool_use"
    }
    assert s["tool_call_count"] == len(tools)
    last: dict[str, dict] = {
        r["message"]["id"]: r["message"]["usage"] for r in records if r["type"] == "assistant"
    }
    assert {t: s[t] for t in TOKENS} == {t: sum(u[t] for u in last.values()) for t in TOKENS}
    (ended,) = [
        e for e in services.ledger.events.get(UUID(s["id"])) if type(e).__name__ == "RunEnded"
    ]
    assert ended.stream_cut is True and ended.exit_code == 0


def test_follow_up_with_session_continues_the_same_ledger_session(services: Services) -> None:
    first = FIXTURES / "claude_code-elixir-stream-json" / "simple_hello.jsonl"
    second = FIXTURES / "claude_code-elixir-stream-json" / "file_listing.jsonl"
    sid = _expected(first)["session"]
    _run(services, first, prompt="hello")
    _run(services, second, prompt="list the files", session=sid)
    s = _session(services, sid)
    assert s["prompt_count"] == 2 and s["status"] == "COMPLETED"
    want = {t: _expected(first)["tokens"][t] + _expected(second)["tokens"][t] for t in TOKENS}
    assert {t: s[t] for t in TOKENS} == want
    detail = queries.get_session(services.models, s["id"])
    assert [b["prompt"] for b in detail["batches"]] == ["hello", "list the files"]
    kinds = _kinds(services, s)
    assert kinds.count("Reopened") == 1 and kinds.count("RunEnded") == 2
    # the second run's own session id was not used
    assert _expected(second)["session"] not in {
        x["external_id"] for x in queries.list_sessions(services.models)
    }


def test_prompt_is_read_from_claude_and_codex_command_lines() -> None:
    claude = ["claude", "-p", "fix the bug", "--output-format", "stream-json", "--verbose"]
    assert prompt_from_argv(claude) == "fix the bug"
    assert (
        prompt_from_argv(["codex", "exec", "--json", "-m", "gpt-5", "write tests"]) == "write tests"
    )
    assert prompt_from_argv(["codex", "exec", "resume", "--last", "--json", "go on"]) == "go on"
    assert prompt_from_argv(["codex", "exec", "--json", "-"]) is None  # prompt on stdin
    # Review finding: ``codex exec resume SESSION_ID`` recorded the thread id as the
    # prompt when the prompt came on stdin or before the subcommand (both documented
    # forms of codex exec), so the real prompt (hook, rollout) counted as a second one.
    thread = "019a2d7a-6455-7170-a661-c6d8b94c630a"
    assert prompt_from_argv(["codex", "exec", "--json", "resume", thread]) is None
    assert prompt_from_argv(["codex", "exec", "--json", "go on", "resume", thread]) == "go on"
    assert prompt_from_argv(["codex", "exec", "--json", "resume", thread, "go on"]) == "go on"
    assert prompt_from_argv(["codex", "exec", "--json", "go on", "resume", "--last"]) == "go on"
    assert prompt_from_argv(["python", "agent.py", "x"]) is None  # not a known agent


def test_cli_run_passes_output_through_and_exits_with_the_agent_status(services: Services) -> None:
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    proc = cli(
        services.settings,
        "run",
        "--prompt",
        "list files",
        "--",
        sys.executable,
        str(FAKE),
        str(recording),
        "--exit",
        "2",
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == recording.read_bytes().rstrip(b"\n") + b"\n"
    assert b"failed" in proc.stderr
    services.runner.catch_up()
    s = _session(services, _expected(recording)["session"])
    assert s["status"] == "FAILED" and s["prompt_count"] == 1


def test_private_spans_of_the_prompt_are_removed_before_storage(services: Services) -> None:
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-1.jsonl"
    _run(services, recording, prompt="what is <private>my api key sk-123</private> 2+2")
    s = _session(services, _expected(recording)["session"])
    (prompt,) = [
        e
        for e in services.ledger.events.get(UUID(s["id"]))
        if type(e).__name__ == "PromptSubmitted"
    ]
    assert "sk-123" not in prompt.text and "2+2" in prompt.text
    assert [r.kind for r in prompt.redactions] == ["private_tag"]


def test_options_that_take_a_list_are_not_the_prompt() -> None:
    # Claude's parser gives a <values...> option every argument up to the next option.
    argv = ["claude", "-p", "Look at my staged changes", "--allowedTools", "Bash(git diff *)",
            "Bash(git commit *)", "--add-dir", "../lib", "../docs", "--output-format", "stream-json"]
    assert prompt_from_argv(argv) == "Look at my staged changes"
    assert prompt_from_argv(["claude", "--add-dir", "../lib", "../docs", "-p", "make test.txt"]) == "make test.txt"


def test_the_runs_prompt_and_the_hooks_copy_of_it_are_one_prompt(services: Services) -> None:
    # With hooks installed, Claude's UserPromptSubmit carries the prompt hookledger run
    # took from the command line: one prompt, whichever arrives first; the same text
    # asked again in a follow-up run is a second prompt.
    from ledger.ingest import ingest_hook

    recording = FIXTURES / "claude_code-elixir-stream-json" / "simple_hello.jsonl"
    sid = _expected(recording)["session"]

    def hook(key: str, prompt: str) -> None:
        body = json.dumps({"session_id": sid, "transcript_path": "/tmp/t.jsonl", "cwd": "/w",
                           "hook_event_name": "UserPromptSubmit", "prompt": prompt}).encode()
        ingest_hook(services.ledger, "claude-code", body, key)

    hook("before", "say hello")  # the hook fires before the stream's first line
    _run(services, recording, prompt="say hello")
    follow_up = FIXTURES / "claude_code-elixir-stream-json" / "file_listing.jsonl"
    _run(services, follow_up, prompt="say hello", session=sid)
    hook("after", "say hello")  # the follow-up's hook, late
    services.runner.catch_up()
    s = _session(services, sid)
    detail = queries.get_session(services.models, s["id"])
    assert [b["prompt"] for b in detail["batches"]] == ["say hello", "say hello"]
    assert s["prompt_count"] == 2
    # the late duplicate did not reopen the ended session (only the follow-up run did);
    # each capture that found its prompt recorded is kept as a record
    kinds = _kinds(services, s)
    assert s["status"] == "COMPLETED" and kinds.count("Reopened") == 1
    assert kinds.count("RecordObserved") == 2


def test_a_prompt_holding_a_token_is_stored_redacted_and_meets_the_hooks_copy(
    services: Services,
) -> None:
    # Review finding (hookledger run --prompt "push with token ghp_…" -- codex exec …):
    # the run removed <private> spans only, so the token was stored in the prompt's text,
    # and Codex's UserPromptSubmit hook (redacted like every hook) hashed another text:
    # two prompts, one of them holding the secret.
    from ledger.ingest import ingest_hook

    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    sid = _expected(recording)["session"]
    token = "ghp_" + "a1B2c3D4e5" * 4
    prompt = f"push with token {token}"
    _run(services, recording, prompt=prompt)
    body = json.dumps({"session_id": sid, "hook_event_name": "UserPromptSubmit", "cwd": "/w",
                       "model": "gpt-5-codex", "permission_mode": "default",
                       "transcript_path": None, "turn_id": "t1", "prompt": prompt}).encode()
    assert ingest_hook(services.ledger, "codex", body, "hook-1").error is None
    services.runner.catch_up()
    s = _session(services, sid)
    assert s["prompt_count"] == 1
    events = list(services.ledger.events.get(UUID(s["id"])))
    (stored,) = [e for e in events if type(e).__name__ == "PromptSubmitted"]
    assert token not in stored.text and "push with token" in stored.text
    assert [r.kind for r in stored.redactions] == ["github_pat"]


def test_a_closed_output_stops_the_pass_through_not_the_recording(services: Services) -> None:
    # ``hookledger run … | head``: the reader goes away after the first lines.
    recording = FIXTURES / "agentcmd-codex-exec-json" / "stream-output-2.jsonl"
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb", buffering=0) as out:
        outcome = run_agent(services.ledger, [sys.executable, str(FAKE), str(recording)], out=out,
                            prompt="list files")
    services.runner.catch_up()
    assert outcome.outcome == "completed"
    s = _session(services, _expected(recording)["session"])
    assert s["status"] == "COMPLETED" and s["tool_call_count"] == _expected(recording)["tools"]
    assert "RunEnded" in _kinds(services, s)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_the_runner_reaches_the_agent_and_terminates_the_session(
    services: Services, sig: signal.Signals
) -> None:
    # The agent handles the signal and exits 0: the session still ends TERMINATED, and
    # everything it wrote is recorded.
    recording = FIXTURES / "claude_code-elixir-stream-json" / "read_file.jsonl"
    timers: list[threading.Timer] = []

    def on_line(_line: bytes) -> None:
        if not timers:
            timers.append(threading.Timer(0.3, os.kill, (os.getpid(), sig)))
            timers[0].start()

    outcome = run_agent(services.ledger, [sys.executable, str(FAKE), str(recording), "--hold"],
                        on_line=on_line, prompt="read it")
    services.runner.catch_up()
    assert (outcome.outcome, outcome.exit_code) == ("terminated", 0), outcome.reason
    assert outcome.reason == f"{sig.name} passed on to the agent, which then exited 0"
    s = _session(services, _expected(recording)["session"])
    assert s["status"] == "TERMINATED" and s["tool_call_count"] == _expected(recording)["tools"]


# -- Ctrl+C: SIGINT from the terminal (to the whole foreground group) or ``kill -INT`` ---------
# The real CLI runs the fake agent, which waits after its first line for SIGINT
# (``--interrupt``); every SIGINT it gets is counted in that file.

INTERRUPTED = FIXTURES / "claude_code-elixir-stream-json" / "read_file.jsonl"


def _run_argv(log: Path, handling: str, exit_code: int) -> list[str]:
    return [sys.executable, "-m", "api.cli", "run", "--prompt", "read it", "--",
            sys.executable, str(FAKE), str(INTERRUPTED), "--interrupt", str(log),
            "--on-interrupt", handling, "--exit", str(exit_code)]


def _await_file(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _run_ended(services: Services) -> tuple[str, Any]:
    """The session's status and its one ``RunEnded`` event."""
    services.runner.catch_up()
    s = _session(services, _expected(INTERRUPTED)["session"])
    (end,) = [e for e in services.ledger.events.get(UUID(s["id"])) if type(e).__name__ == "RunEnded"]
    return s["status"], end


def _run_end(services: Services) -> tuple[str, dict]:
    status, end = _run_ended(services)
    return status, {"outcome": end.outcome, "exit_code": end.exit_code, "signal": end.signal}


def _at_a_terminal(argv: list[str], env: dict[str, str], ready: Path, keys: bytes) -> tuple[int, str]:
    """Run ``argv`` on a real terminal (pty), in its foreground group; once ``ready``
    exists, type ``keys``. Returns the exit status and what the terminal showed."""
    pid, tty = pty.fork()
    if pid == 0:  # the child: session leader, the pty its controlling terminal
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    output, wait_status = b"", None
    try:
        _await_file(ready)
        os.write(tty, keys)
        while True:
            try:
                chunk = os.read(tty, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            output += chunk
        _, wait_status = os.waitpid(pid, 0)
    finally:
        os.close(tty)
        if wait_status is None:  # not reaped: a failed test leaves no process behind
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status), output.decode(errors="replace")


@pytest.mark.parametrize(
    ("handling", "exit_code", "want", "status"),
    [
        ("die", 0, {"outcome": "terminated", "exit_code": None, "signal": 2}, 130),
        ("exit", 130, {"outcome": "terminated", "exit_code": 130, "signal": None}, 130),
        # codex exec exits 0 on Ctrl+C (openai/codex#4721): still an interrupted run
        ("exit", 0, {"outcome": "terminated", "exit_code": 0, "signal": None}, 0),
        # it cancels nothing and completes its turn: the run is its own again
        ("go-on", 0, {"outcome": "completed", "exit_code": 0, "signal": None}, 0),
    ],
    ids=["dies-of-it", "exits-130", "exits-0", "goes-on"],
)
def test_kill_int_to_the_runner_reaches_the_agent_once(
    services: Services, tmp_path: Path, handling: str, exit_code: int, want: dict, status: int
) -> None:
    # ``kill -INT <hookledger pid>`` reaches hookledger alone: it passes it on, waits for
    # the agent, records how the run ended and exits with the agent's status.
    log = tmp_path / "interrupts"
    proc = subprocess.Popen(_run_argv(log, handling, exit_code), env=settings_env(services.settings),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _await_file(log)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == status, err.decode()
    if handling != "die":
        assert log.read_text() == "SIGINT\n"  # once
    session_status, end = _run_end(services)
    assert end == want
    assert session_status == ("COMPLETED" if want["outcome"] == "completed" else "TERMINATED")
    if handling == "go-on":  # what it wrote after the interrupt is recorded
        s = _session(services, _expected(INTERRUPTED)["session"])
        assert s["tool_call_count"] == _expected(INTERRUPTED)["tools"]


@pytest.mark.parametrize(("handling", "exit_code", "outcome"),
                         [("go-on", 0, "completed"), ("exit", 130, "terminated")])
def test_ctrl_c_at_the_terminal_reaches_the_agent_once(
    services: Services, tmp_path: Path, handling: str, exit_code: int, outcome: str
) -> None:
    # A real terminal (pty) with hookledger run in its foreground group: Ctrl+C sends
    # SIGINT to hookledger and the agent alike. The agent must get it once (a second
    # one would be a second Ctrl+C: Claude Code exits on it), and an agent that goes on
    # keeps running and being recorded.
    log = tmp_path / "interrupts"
    argv = _run_argv(log, handling, exit_code)
    status, output = _at_a_terminal(argv, settings_env(services.settings), log, b"\x03")  # Ctrl+C
    assert status == exit_code, output
    assert log.read_text() == "SIGINT\n"  # once, not once from the terminal and once from us
    session_status, end = _run_end(services)
    assert end["outcome"] == outcome
    assert session_status == ("COMPLETED" if outcome == "completed" else "TERMINATED")


def test_ctrl_backslash_at_the_terminal_is_not_said_to_be_passed_on(
    services: Services, tmp_path: Path
) -> None:
    # Ctrl+\ at a real terminal sends SIGQUIT to the whole foreground group: the agent
    # got it from the terminal, not from hookledger, which did not send it again. The
    # run's end said "SIGQUIT passed on to the agent".
    log = tmp_path / "signals"
    argv = [sys.executable, "-m", "api.cli", "run", "--prompt", "read it", "--",
            sys.executable, str(FAKE), str(INTERRUPTED), "--hold", "--hold-log", str(log),
            "--senders"]
    status, output = _at_a_terminal(argv, settings_env(services.settings), log, b"\x1c")  # Ctrl+\
    assert status == 0, output
    assert log.read_text() == "SIGQUIT from 0\n"  # once, from the kernel (the terminal)
    session_status, end = _run_ended(services)
    assert (end.outcome, end.exit_code, end.signal) == ("terminated", 0, None)
    assert end.reason == "SIGQUIT from the terminal, which sent it to the agent too; the agent then exited 0"
    assert session_status == "TERMINATED"


def test_a_kill_of_the_runners_process_group_ends_the_agent_too(
    services: Services, tmp_path: Path
) -> None:
    # A supervisor stopping a job for good (``kill -KILL -<pgid>``): the agent shares
    # hookledger's process group, so it ends with hookledger instead of running on
    # unrecorded (with a group of its own it would: SIGKILL cannot be passed on).
    log = tmp_path / "signals"
    argv = [sys.executable, "-m", "api.cli", "run", "--prompt", "read it", "--",
            sys.executable, str(FAKE), str(INTERRUPTED), "--hold", "--hold-log", str(log)]
    # a session of its own: hookledger leads its group and has no controlling terminal
    proc = subprocess.Popen(argv, env=settings_env(services.settings), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _await_file(log)  # the agent runs and holds
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1
        agent = int(children[0])
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while _alive(agent) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(agent)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has: its parent, the
    runner, was killed and init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# Runs the real CLI, sending it ``sig`` the moment it starts recording the run's end
# (``_Recorder.finish``, the agent has exited): a Ctrl+C or a supervisor's SIGTERM at
# that instant. ``thread``: another thread runs, so run_signals uses its handlers
# rather than a thread waiting for the signals (sigtimedwait needs a lone thread).
_SIGNAL_AT_THE_END = """
import os, signal, sys, threading
from api.cli import main
sig, threads = signal.Signals[sys.argv[1]], sys.argv[2]
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_qualname == "_Recorder.finish":
        sys.setprofile(None)
        os.kill(os.getpid(), sig)
if threads == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
sys.setprofile(profile)
main(sys.argv[3:], prog_name="hookledger")
"""


@pytest.mark.parametrize("threads", ["lone", "thread"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_the_end_is_recorded_does_not_lose_it(
    services: Services, sig: signal.Signals, threads: str
) -> None:
    # The agent completed and exited; Ctrl+C (or SIGTERM) arrives while hookledger records
    # the run's end. It raised KeyboardInterrupt there (SIGTERM killed hookledger): no
    # RunEnded, the session left ACTIVE, exit 1. The end is recorded as the agent ended
    # (the late signal reached no agent) and hookledger exits with the agent's status.
    argv = [sys.executable, "-c", _SIGNAL_AT_THE_END, sig.name, threads,
            "run", "--prompt", "read it", "--", sys.executable, str(FAKE), str(INTERRUPTED)]
    proc = subprocess.run(argv, env=settings_env(services.settings), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    session_status, end = _run_end(services)
    assert end == {"outcome": "completed", "exit_code": 0, "signal": None}
    assert session_status == "COMPLETED"
