"""``hookledger run``: spawn an agent, stream its output into the ledger, record the outcome.

The agent is ``claude -p … --output-format stream-json --verbose`` or
``codex exec --json …`` (FORMATS.md A4, A5). Its stdout lines are passed through to our
stdout as they arrive and recorded at once (one :meth:`Ledger.record` per line, so a
live viewer sees them), parsed by the same source module an import of the recording
uses (same keys: importing the saved output afterwards appends nothing). The format is
told by the first JSON line (a hint from the command name covers lines before it).

When the process exits, a ``RunEnded`` domain event records the outcome:

======================================  ===========  =============
process                                 ``outcome``  session state
======================================  ===========  =============
exit 0, success result / no result      completed    COMPLETED
exit 0 but an error result or cut line  failed       FAILED
non-zero exit                           failed       FAILED
killed by a signal                      terminated   TERMINATED
exited after SIGTERM, SIGHUP, SIGQUIT   terminated   TERMINATED
interrupted (Ctrl+C), then it exited    terminated   TERMINATED
======================================  ===========  =============

Signals sent to ``hookledger run`` reach the agent once (:mod:`ledger.run_signals`:
Ctrl+C from the terminal reaches it directly, ``kill -INT`` to hookledger is passed
on; the reason says which), and hookledger waits for the agent to end, then records
the end with those signals still caught (one arriving meanwhile neither aborts the
recording nor changes the outcome: it reached no agent). An interrupt ends the run
``terminated`` (an operator's stop, DESIGN.md) when the agent exits with no turn
completed after it (codex exec exits 0 on Ctrl+C); an agent that handles it and goes
on keeps running and being recorded, and once it completes a turn after the interrupt
the rules above decide as if there had been none.

A last line cut mid-way (no newline, not JSON) is kept as a ``Rejected`` line with the
reason, and ``stream_cut`` is set. The prompt is not part of either stream: it is taken
from ``prompt`` or, for ``claude``/``codex`` commands, from the command line
(:func:`prompt_from_argv`) and recorded as the run's first ``PromptSubmitted``.
``session`` records everything under that external session id (a follow-up prompt
continues the same ledger session; the aggregate appends ``Reopened`` after an end).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO

import orjson

from ledger import jsontext
from ledger.app import Ledger, RecordResult
from ledger.observation import Observation, Rejected, SessionRef
from ledger.privacy import strip_private
from ledger.run_signals import Received, passing_on
from ledger.sources import claude_stream, codex_exec, stream_formats
from ledger.sources.claude_common import text_hash

SOURCE_FORMAT = "hookledger.run"
_PARSERS: dict[str, tuple[str, Any]] = {
    "claude-code.stream-json": ("claude-code", claude_stream.StreamParser),
    "codex.exec-json": ("codex", codex_exec.ExecParser),
}
# Options of ``claude`` / ``codex exec`` that take a value (so that value is not the prompt).
_VALUE_OPTIONS = frozenset(
    {
        "--output-format",
        "--input-format",
        "--model",
        "-r",
        "--resume",
        "--session-id",
        "--allowedTools",
        "--allowed-tools",
        "--disallowedTools",
        "--disallowed-tools",
        "--append-system-prompt",
        "--system-prompt",
        "--permission-mode",
        "--max-turns",
        "--mcp-config",
        "--add-dir",
        "--settings",
        "--fallback-model",
        "--agents",
        "--max-budget-usd",
        "--json-schema",
        "--setting-sources",
        "--plugin-dir",
        "--betas",
        "--permission-prompt-tool",
        "-m",
        "-c",
        "--config",
        "-s",
        "--sandbox",
        "-C",
        "--cd",
        "--profile",
        "-i",
        "--image",
        "--output-schema",
        "--color",
        "-o",
        "--output-last-message",
        "--enable",
        "--disable",
        "--local-provider",
    }
)


# Options of ``claude`` that take a list (``<tools...>``): like Claude's own parser
# (commander), they take every argument up to the next option.
_CLAUDE_LIST_OPTIONS = frozenset(
    {
        "--allowedTools",
        "--allowed-tools",
        "--disallowedTools",
        "--disallowed-tools",
        "--add-dir",
        "--mcp-config",
        "--betas",
        "--plugin-dir",
        "--file",
    }
)


@dataclass
class RunOutcome:
    """What one run did. ``exit_status`` is what ``hookledger run`` exits with (the
    agent's exit code, 128 + signal number when it was killed)."""

    outcome: str
    exit_code: int | None
    signal: int | None
    stream_cut: bool
    reason: str | None
    session: SessionRef | None
    fmt: str | None
    recorded: RecordResult = field(default_factory=RecordResult)

    @property
    def exit_status(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code or 0


def agent_of(argv: Sequence[str]) -> str | None:
    """``claude-code`` or ``codex`` from the command name, else None."""
    name = os.path.basename(argv[0]) if argv else ""
    if name.startswith("claude"):
        return "claude-code"
    if name.startswith("codex"):
        return "codex"
    return None


def prompt_from_argv(argv: Sequence[str]) -> str | None:
    """The prompt of a ``claude``/``codex`` command line: the last argument that is not an
    option or an option's value (``-`` = read from stdin: None). A heuristic; pass
    ``prompt`` to :func:`run_agent` to be exact. None for other commands."""
    agent = agent_of(argv)
    if agent is None:
        return None
    positional: list[str] = []
    args = list(argv[1:])
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            positional.extend(args[i + 1 :])
            break
        if a.startswith("-") and a != "-":
            i += 2 if (a in _VALUE_OPTIONS and "=" not in a) else 1
            if agent == "claude-code" and a in _CLAUDE_LIST_OPTIONS:
                while i < len(args) and not args[i].startswith("-"):
                    i += 1  # ``--add-dir ../lib ../docs``: every value up to the next option
            continue
        positional.append(a)
        i += 1
    if agent == "codex":
        if "resume" in positional[1:] and "--last" not in args:
            # ``codex exec [PROMPT] resume SESSION_ID [PROMPT]``: the id is not the prompt
            # (with the prompt on stdin or before ``resume``, it was the last argument).
            at = positional.index("resume", 1)
            del positional[at + 1 : at + 2]
        positional = [p for p in positional if p not in ("exec", "e", "resume")]
    if not positional or positional[-1] == "-":
        return None
    return positional[-1]


class _Recorder:
    """Feeds lines to the stream's parser and records what it yields, line by line."""

    def __init__(
        self, ledger: Ledger, argv: Sequence[str], session: str | None, prompt: str | None
    ) -> None:
        self.ledger = ledger
        self.run_id = uuid.uuid4().hex
        self.source = f"run:{self.run_id}"
        self.override = session
        self.prompt = prompt
        self.started_at = datetime.now(UTC)
        self.hint = agent_of(argv)
        self.fmt: str | None = None
        self.parser: Any = None
        self.pending: list[tuple[bytes, str]] = []
        self.prompt_recorded = False
        self.stream_cut = False
        self.result = RecordResult()
        self.lines = 0

    def feed(self, line: bytes) -> None:
        self.lines += 1
        location = f"line {self.lines}"
        if not line.strip():
            return
        if self.parser is None:
            self.pending.append((line, location))
            fmt = self._detect(line)
            if fmt is None:
                return
            self._start(fmt)
            pending, self.pending = self.pending, []
            for pline, ploc in pending:
                self._record(self._parse(pline, ploc), pline)
            return
        self._record(self._parse(line, location), line)

    @property
    def completed_turn(self) -> str | None:
        """The key of the last turn end (``result``, ``turn.completed``) when it was a
        success, else None."""
        if self.parser is None or self.parser.end_error is not None:
            return None
        return self.parser.end_key  # type: ignore[no-any-return]

    def finish(
        self, rc: int, received: Received | None = None, interrupted: bool = False
    ) -> RunOutcome:
        if self.parser is None and self.pending:
            # No line told the format: use the command's hint, else keep the lines as rejected.
            fmt = {"claude-code": "claude-code.stream-json", "codex": "codex.exec-json"}.get(
                self.hint or ""
            )
            if fmt is not None:
                self._start(fmt)
                pending, self.pending = self.pending, []
                for pline, ploc in pending:
                    self._record(self._parse(pline, ploc), pline)
            else:
                reason = "output of an agent whose stream format was not recognised"
                rejected = [
                    Rejected(self.source, loc, reason, line, self.hint or "unknown", SOURCE_FORMAT)
                    for line, loc in self.pending
                ]
                self._record(rejected, b"")
        if self.parser is not None:
            self._record(self.parser.finish(), b"")
        session = self._session()
        outcome, exit_code, sig, reason = _outcome(
            rc, self.parser, self.stream_cut, received or Received(), interrupted
        )
        end_key = self.parser.end_key if self.parser is not None else None
        end = Observation(
            session,
            "RunEnded",
            f"{end_key}:end" if end_key else f"{self.source}:end",
            {
                "outcome": outcome,
                "exit_code": exit_code,
                "signal": sig,
                "reason": reason,
                "stream_cut": self.stream_cut,
            },
            source_format=self.fmt or SOURCE_FORMAT,
            occurred_at=datetime.now(UTC),
            record_key=end_key,
        )
        self._record([*self._prompt_first(session), end], b"")
        return RunOutcome(
            outcome, exit_code, sig, self.stream_cut, reason, session, self.fmt, self.result
        )

    # -- internals -----------------------------------------------------------------

    def _detect(self, line: bytes) -> str | None:
        try:
            rec = jsontext.loads(line)
        except orjson.JSONDecodeError:
            return None
        fmt = stream_formats.detect_records([rec])
        return fmt if fmt in _PARSERS else None

    def _start(self, fmt: str) -> None:
        self.fmt = fmt
        self.parser = _PARSERS[fmt][1](self.source, session_override=self.override, emit_end=False)

    def _parse(self, line: bytes, location: str) -> list[Observation | Rejected]:
        """The parser's facts of one line; a line it cannot read is kept as rejected input
        with the reason, and the run goes on (its output still reaches the reader)."""
        try:
            return list(self.parser.feed_line(line, location))
        except Exception as e:
            assert self.fmt is not None
            reason = f"the {self.fmt} parser cannot read this line: {type(e).__name__}: {e}"
            return [Rejected(self.source, location, reason, line, _PARSERS[self.fmt][0], self.fmt)]

    def _session(self) -> SessionRef:
        if self.parser is not None and self.parser.session is not None:
            return self.parser.session  # type: ignore[no-any-return]
        agent = _PARSERS[self.fmt][0] if self.fmt else (self.hint or "unknown")
        return SessionRef(agent, self.override or f"run-{self.run_id}")

    def _prompt_first(self, session: SessionRef) -> list[Observation]:
        if self.prompt_recorded or self.prompt is None:
            return []
        self.prompt_recorded = True
        # private spans and secrets (tokens, keys) removed, as from a hook's prompt: the
        # stored text holds no secret, and its alias hash is the hook's and rollout's
        text, removed = strip_private(self.prompt, path="$.text")
        redactions = tuple(removed)
        prompt = Observation(
            session,
            "PromptSubmitted",
            f"{self.source}:prompt",
            {"text": text, "prompt_kind": "human"},
            source_format=SOURCE_FORMAT,
            occurred_at=self.started_at,
            record_key=f"{self.source}:prompt",
            redactions=redactions,
        )
        # The same prompt from a UserPromptSubmit hook, or from the transcript or rollout
        # imported later, meets this one on its alias and is not counted twice.
        prompt.extra["hook_prompt_hash"] = text_hash(text)
        return [prompt]

    def _record(self, items: list[Observation | Rejected], line: bytes) -> None:
        if line and not line.endswith(b"\n"):
            for item in items:
                if isinstance(item, Rejected):
                    self.stream_cut = True
                    item.reason = (
                        f"stream cut mid-line (output ended without a newline): {item.reason}"
                    )
        now = datetime.now(UTC)
        facts = [i for i in items if isinstance(i, Observation)]
        for f in facts:
            if f.occurred_at is None:
                f.occurred_at = now
        if facts:
            # The prompt goes before the stream's first fact, except after a leading
            # ``Started`` (``system/init``, ``thread.started``): recorded the other way
            # round, ``Started`` moved the session from PROCESSING back to ACTIVE while
            # the agent was working on the prompt.
            at = items.index(facts[0]) + (facts[0].kind == "Started")
            items = [*items[:at], *self._prompt_first(facts[0].session), *items[at:]]
        if items:
            self.result.add(self.ledger.record(items))


def _outcome(
    rc: int, parser: Any, cut: bool, received: Received, interrupted: bool = False
) -> tuple[str, int | None, int | None, str | None]:
    if rc < 0:
        sig = -rc
        return "terminated", None, sig, f"killed by {signal.Signals(sig).name}"
    if received.terminating is not None:  # it handled SIGTERM, SIGHUP or SIGQUIT, then exited
        name = signal.Signals(received.terminating).name
        if received.by_terminal:  # Ctrl+\ (or a hangup): not from us
            return "terminated", rc, None, (
                f"{name} from the terminal, which sent it to the agent too; the agent then exited {rc}"
            )
        return "terminated", rc, None, f"{name} passed on to the agent, which then exited {rc}"
    if interrupted:  # it handled Ctrl+C, completed no turn after it, and exited
        return "terminated", rc, None, f"interrupted by SIGINT; the agent then exited {rc}"
    if rc > 0:
        return "failed", rc, None, f"exit code {rc}"
    if parser is not None and parser.end_error is not None:
        return "failed", 0, None, parser.end_error
    if cut:
        return "failed", 0, None, "stream cut mid-line"
    return "completed", 0, None, None


def run_agent(
    ledger: Ledger,
    argv: Sequence[str],
    *,
    session: str | None = None,
    prompt: str | None = None,
    out: BinaryIO | None = None,
    on_line: Callable[[bytes], None] | None = None,
) -> RunOutcome:
    """Run ``argv`` to completion, recording its output stream and outcome in ``ledger``.

    Args:
        argv: the agent command (``["claude", "-p", "…", "--output-format", "stream-json",
            "--verbose"]`` or ``["codex", "exec", "--json", "…"]``).
        session: external session id to record under (default: the agent's own id).
        prompt: the prompt text (default: :func:`prompt_from_argv`).
        out: where the agent's stdout is passed through (bytes, flushed per line).
        on_line: called with each raw line after it was recorded.

    When ``out`` is closed by its reader (``hookledger run … | head``), passing through
    stops and recording goes on to the end of the run.

    Raises:
        FileNotFoundError / PermissionError: the command cannot be started (nothing is
            recorded then).
    """
    recorder = _Recorder(
        ledger, argv, session, prompt if prompt is not None else prompt_from_argv(argv)
    )
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE)
    assert proc.stdout is not None
    settled = 0  # interrupts the agent had got when it last completed a turn
    try:
        with passing_on(proc) as relay:
            received = relay.received
            while line := proc.stdout.readline():
                if out is not None:
                    try:
                        out.write(line)
                        out.flush()
                    except (BrokenPipeError, ValueError):
                        # the reader went away (``| head``): keep recording, stop passing through
                        out = None
                interrupts, turn = received.interrupts, recorder.completed_turn
                recorder.feed(line)
                if recorder.completed_turn not in (None, turn):
                    settled = interrupts  # it went on after those: they did not end the run
                if on_line is not None:
                    on_line(line)
            rc = proc.wait()
            received = relay.agent_ended()
            # Still in the block: a signal now (Ctrl+C, SIGTERM) reaches no agent, and
            # neither cuts the recording of the end short nor changes what it says.
            return recorder.finish(rc, received, received.interrupts > settled)
    finally:
        with contextlib.suppress(OSError):
            proc.stdout.close()
