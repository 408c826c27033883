"""The ``Session`` aggregate: one event stream per agent session.

Event classes are nested here and are a storage contract: their topics
(``ledger.session:Session.<Name>``) are persisted. Evolve a payload with
``class_version`` and ``upcast_vN_vN+1``; never rename or move a class without
registering the old topic.

Units: tokens are counts; ``duration_ms`` milliseconds; times are UTC datetimes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import orjson
from eventsourcing.domain import BaseAggregate, CanInitAggregate
from eventsourcing.utils import get_topic

from ledger.envelope import LedgerEvent, MemoryObservation, Redaction, seal, start_stream
from ledger.lifecycle import ENDED_STATES, Liveness, SessionStatus
from ledger.observation import BATCH_OPENERS, BEFORE_FIRST_PROMPT, TOKENS, Observation, call_hash

S = SessionStatus

# Facts that show the agent is alive; on an ended session they reopen it.
_ACTIVITY = frozenset(
    {
        "Started",
        "PromptSubmitted",
        "AssistantReplied",
        "ToolCallStarted",
        "ToolCallCompleted",
        "TurnEnded",
        "PermissionRequested",
    }
)


# Sources whose usage is a thread's running total, recorded as differences (``running_total``
# in :meth:`Session.observe`): the sum of their recorded usage is the last total recorded.
_RUNNING_TOTAL_SOURCES = frozenset({"codex.exec-json"})


class Session(BaseAggregate[UUID]):
    """State of one agent session, rebuilt from its events.

    Commands: :meth:`open` (class method) and :meth:`observe`. Observed facts are never
    refused: a duplicate (same ``event_key`` or alias) is ignored, anything else is
    appended, reopening an ended session first when it is new activity.
    """

    class Event(LedgerEvent):
        """Base of session events: envelope + ``status`` (the lifecycle state after
        this event) and ``batch`` (1-based prompt batch; 0 = before the first prompt)."""

        status: SessionStatus
        batch: int = 0

    class Opened(Event, CanInitAggregate[UUID]):
        """First event of every stream. ``parent_id`` links a subagent run to its parent."""

        originator_topic: str
        external_id: str
        parent_id: UUID | None = None
        agent_type: str | None = None
        cwd: str | None = None

    class Started(Event):
        """The agent (re)started the session: ``source`` startup|resume|clear|compact."""

        source: str | None = None
        model: str | None = None
        permission_mode: str | None = None

    class PromptSubmitted(Event):
        """Input to the agent. ``prompt_kind``: ``human`` (typed by a person) and
        ``task`` (a subagent's task prompt) open a prompt batch and count as prompts (a
        slash command whose prompt the model answers, ``/review fix the parser``, is
        ``human``); ``command`` (a local slash command the agent runs itself, ``/clear``,
        ``/model``) and ``task_notification`` are recorded but do not."""

        text: str
        prompt_id: str | None = None
        prompt_kind: str = "human"

    class AssistantReplied(Event):
        """Assistant output (one transcript record; several may share ``message_id``)."""

        message_id: str | None = None
        model: str | None = None
        text: str = ""
        stop_reason: str | None = None
        has_thinking: bool = False

    class ToolCallStarted(Event):
        """A tool call began (``tool_input`` as the agent gave it; ``message_id`` of the
        assistant message that asked for it)."""

        tool_use_id: str
        tool_name: str
        tool_input: Any = None
        message_id: str | None = None

    class ToolCallCompleted(Event):
        """A tool call finished; ``is_error`` with ``error`` when it failed (ms units)."""

        tool_use_id: str
        tool_name: str | None = None
        output: Any = None
        is_error: bool = False
        error: str | None = None
        duration_ms: int | None = None
        interrupted: bool = False

    class UsageRecorded(Event):
        """Token usage of one model response. Several records of one ``message_id``:
        the last one recorded wins (read models replace, never add). Tokens: counts;
        ``input_tokens`` excludes cache reads (Anthropic convention).
        ``cache_creation_1h_input_tokens``: the part of ``cache_creation_input_tokens``
        written to the cache with a 1-hour TTL (Anthropic's
        ``usage.cache_creation.ephemeral_1h_input_tokens``; priced at the 1-hour write
        rate, the rest at the 5-minute rate); 0 when the source gives no split
        (class_version 2; a version 1 event reads as 0)."""

        message_id: str
        model: str | None = None
        input_tokens: int = 0
        output_tokens: int = 0
        cache_creation_input_tokens: int = 0
        cache_read_input_tokens: int = 0
        cache_creation_1h_input_tokens: int = 0

        class_version: ClassVar[int] = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Version 1 kept one cache-creation count (read as all 5-minute writes)."""
            state["cache_creation_1h_input_tokens"] = 0

    class TurnEnded(Event):
        """The agent stopped and waits for the user (Stop hook, turn_duration record)."""

        reason: str | None = None
        last_assistant_message: str | None = None
        duration_ms: int | None = None

    class Compacted(Event):
        """The agent compacted its context (``trigger`` manual|auto; ``pre_tokens`` the
        context size before, tokens)."""

        trigger: str | None = None
        pre_tokens: int | None = None
        summary: str | None = None

    class SubagentLinked(Event):
        """Lineage: a subagent run (child session) was spawned by ``tool_use_id``."""

        child_id: UUID
        child_external_id: str
        agent_id: str
        agent_type: str | None = None
        tool_use_id: str | None = None

    class LinkedToParent(Event):
        """Lineage seen from the child: the parent tool call that spawned this run."""

        parent_id: UUID
        parent_tool_use_id: str | None = None

    class SubagentStopped(Event):
        """A subagent run (child session ``child_id``) finished."""

        child_id: UUID | None = None
        agent_id: str | None = None
        agent_type: str | None = None
        last_assistant_message: str | None = None

    class NotificationReceived(Event):
        """The agent notified the user (``notification_type`` e.g. idle_prompt,
        permission_prompt)."""

        message: str | None = None
        notification_type: str | None = None
        title: str | None = None

    class PermissionRequested(Event):
        """The agent asks the user to allow a tool call."""

        tool_name: str | None = None
        tool_input: Any = None
        suggestions: Any = None

    class Ended(Event):
        """The agent ended the session (``reason`` as the agent gave it)."""

        reason: str | None = None

    class Reopened(Event):
        """Activity arrived on an ended session; ``cause_key`` names that activity."""

        reason: str
        from_status: SessionStatus
        cause_key: str

    class CwdLearned(Event):
        """The session's working directory, from the first fact that named one, when the
        stream was opened without one (Claude Code 2.x starts a transcript with records
        that carry no ``cwd``; a Gemini chat file names none, its hooks do). ``Opened``
        holds the ``cwd`` otherwise; a session learns it once."""

        cwd: str

    class RecordObserved(Event):
        """A source record with no modelled fact (progress, snapshot, attachment, …),
        kept whole in ``raw`` so a better parser can re-derive facts later."""

        record_type: str

    class LateStartObserved(RecordObserved):
        """A tool call's start that arrived after its completion (``record_type``
        :data:`LATE_START`: a ``PreToolUse`` spooled while its ``PostToolUse`` was sent,
        hook logs replayed in name order, a rollout that writes a call's output before
        the call). It is no second call: the call's start was derived from
        its completion, or another source recorded the call, before it came. Its raw
        record is kept, and the start as the agent gave it: ``tool_use_id`` (the call as
        recorded), ``tool_name`` and ``tool_input``; the ``tool_calls`` read model takes
        its time and input as the call's start unless the start it has is earlier."""

        tool_use_id: str
        tool_name: str | None = None
        tool_input: Any = None

    class UnknownHookEvent(Event):
        """A hook whose ``hook_event_name`` this version does not know; raw kept."""

        hook_event_name: str

    class CostReported(Event):
        """The agent's own cost figure, kept beside the ledger's computed cost (client-side
        and approximate, e.g. stream-json ``result.total_cost_usd``). ``cost_usd`` in USD
        for ``scope`` (``run``: one agent process or turn); ``by_model`` maps a model name
        to the agent's own per-model figures when it gives them (``modelUsage``)."""

        cost_usd: float
        scope: str = "run"
        by_model: Any = None

    # -- agents: Gemini CLI, Cursor, OpenClaw (OpenClaw seed design: session_suspend/resume) --

    class Suspended(Event):
        """The agent suspended the session (OpenClaw ``session_suspend``, fork
        akoscz/openclaw ``feature/session-hooks``): the session is PAUSED until resumed."""

        reason: str | None = None

    class Resumed(Event):
        """The agent resumed a suspended session (OpenClaw ``session_resume``): ACTIVE."""

        reason: str | None = None
    # -- lifecycle: liveness jobs and operator commands (ledger/jobs.py, ledger/commands.py) --

    class JobDecided(Event):
        """Base of a liveness job's decisions: the evidence an auditor can re-check.
        ``rule`` (``idle_batch``, ``idle_session``, ``unbatched_activity``,
        ``archive_after``; ``late_task_prompt``, decided by the session itself when a
        subagent's task prompt arrives after its run's activity, threshold 0),
        ``threshold_s`` (seconds), ``measured_from`` (the latest
        activity time the rule measured idle time from, on the source's clock where the
        session has one, or the timestamp of an operator's later ``resume``, which
        restarts the clock), ``last_version`` (the stream version the job saw last),
        ``last_position`` (the notification position of the read model it read) and
        ``decided_at`` (the job's ``now``)."""

        rule: str
        threshold_s: int
        measured_from: datetime | None = None
        last_version: int
        last_position: int | None = None
        decided_at: datetime

    class BatchClosed(JobDecided):
        """A prompt batch with no activity for ``threshold_s`` was closed (``batch``); or
        (rule ``late_task_prompt``, reason ``session_end``) the batch a subagent's late
        task prompt opened, closed at the run's end (``measured_from``) it followed."""

        reason: str = "idle_timeout"

    class TimedOut(JobDecided):
        """The session had no activity for ``threshold_s`` and was completed."""

        reason: str = "idle_timeout"

    class ActivitiesAttached(JobDecided):
        """Activity that arrived outside any open batch was attached to ``batch``: the
        latest batch, or, when it was recorded before any prompt (``recovery``: batch 0),
        a new recovery batch, or (rule ``late_task_prompt``) the batch that a subagent's
        task prompt recorded after it opened, whose counts it joins.
        ``versions`` are the attached events' stream versions; ``tool_use_ids`` their
        tool calls, ``tool_errors`` how many of those failed."""

        recovery: bool = False
        versions: tuple[int, ...] = ()
        tool_use_ids: tuple[str, ...] = ()
        tool_errors: int = 0
        first_activity_at: datetime | None = None

    class Archived(JobDecided):
        """A session ended more than ``threshold_s`` ago was archived."""

    class CommandApplied(Event):
        """An operator's command (``pause``, ``resume``, ``terminate``, ``archive``,
        ``fork``) moved the session from ``from_status`` to ``to_status`` (``status``).
        ``by`` names who asked; ``fork_id`` is the new session of a fork."""

        command: str
        from_status: SessionStatus
        to_status: SessionStatus
        by: str | None = None
        reason: str | None = None
        fork_id: UUID | None = None

    class ForkedFrom(Event):
        """Second event of a forked session: the history that follows (events 3 ..
        ``parent_version`` + 1) is a copy of ``parent_id``'s events 2 .. ``parent_version``
        (same classes, payloads and event keys; re-chained), up to notification position
        ``parent_position``."""

        parent_id: UUID
        parent_version: int
        parent_position: int | None = None
        by: str | None = None
    # -- agents: runner outcome (hookledger run, stream imports) --

    class RunEnded(Event):
        """An agent process ended (``hookledger run``, or the final ``result`` /
        ``turn.completed`` record of an imported stream). ``outcome``: ``completed`` ->
        COMPLETED, ``failed`` (error result, non-zero exit, stream cut) -> FAILED,
        ``terminated`` (killed by a signal, ended after a SIGTERM, SIGHUP or SIGQUIT that
        hookledger passed on or the terminal sent, or interrupted by Ctrl+C with no turn
        completed after it) -> TERMINATED. ``exit_code`` and ``signal``
        (signal number) are None when unknown; ``stream_cut``: the output ended mid-line."""

        outcome: str
        exit_code: int | None = None
        signal: int | None = None
        reason: str | None = None
        stream_cut: bool = False

    # -- memory: summaries written by the summary worker (api/summaries.py) --

    class Summarised(Event):
        """A structured summary of prompt batch ``batch`` (``scope`` ``batch``) or of the
        whole session (``scope`` ``session``), appended by the summary worker from the
        recorded facts — a ledger-made event, never activity, never observed.

        ``request`` (what was asked), ``investigated``, ``learned``, ``completed``,
        ``next_steps``: short sentences. ``files_read``, ``files_edited``,
        ``commands_failed``: the facts they were derived from (paths as the agent gave
        them; commands as run). ``observations``: classified notes
        (:class:`~ledger.envelope.MemoryObservation`). ``summariser``: ``deterministic``
        or ``llm``; for ``llm``: ``model``, ``input_tokens`` / ``output_tokens`` (tokens
        the summariser spent) and ``cost_usd`` (USD; None when the model has no price).
        ``fallback_reason``: why a configured LLM summariser was not used
        (``budget_exhausted:day``, ``budget_exhausted:session``, ``unavailable: …``).
        ``tokens_estimated``: the server reported no usage, so ``input_tokens`` /
        ``output_tokens`` are the worker's pre-call estimate (prompt characters / 3, and
        the requested ``max_tokens``), charged to the budget as if spent (class_version 2;
        a version 1 event reads as False).
        ``through_version``: the last stream version whose facts were summarised;
        ``through_position``: the notification position the worker read up to."""

        scope: str
        request: str | None = None
        investigated: tuple[str, ...] = ()
        learned: tuple[str, ...] = ()
        completed: tuple[str, ...] = ()
        next_steps: tuple[str, ...] = ()
        files_read: tuple[str, ...] = ()
        files_edited: tuple[str, ...] = ()
        commands_failed: tuple[str, ...] = ()
        observations: tuple[MemoryObservation, ...] = ()
        summariser: str = "deterministic"
        model: str | None = None
        input_tokens: int = 0
        output_tokens: int = 0
        cost_usd: float | None = None
        fallback_reason: str | None = None
        through_version: int
        through_position: int | None = None
        tokens_estimated: bool = False

        class_version: ClassVar[int] = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Version 1 recorded only usage the server reported."""
            state["tokens_estimated"] = False

    EVENT_CLASSES: ClassVar[dict[str, type[Session.Event]]] = {}

    def __init__(
        self,
        external_id: str,
        agent: str,
        parent_id: UUID | None = None,
        agent_type: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.external_id = external_id
        self.agent = agent
        self.parent_id = parent_id
        self.agent_type = agent_type
        self.cwd = cwd
        self.status = S.CREATED
        self.batch = 0
        self.batch_open = False
        self.head_digest = ""
        self.seen_keys: set[str] = set()
        self.batch_of_key: dict[str, int] = {}
        self.ended_at: datetime | None = None
        self.live_counts: dict[tuple[str, str], int] = {}
        """Sightings by a live capture (``hook``, ``run``: :func:`_live_capture`) per alias
        family and hash (``prompt:{hash}``, ``call:{hash}``), those another source
        recorded first included: the n of the capture's next alias (:meth:`live_alias`)."""
        self.unpaired_calls: dict[str, str] = {}
        """Open calls of id-less hooks, oldest first: ``tool_use_id`` -> call hash
        (:func:`ledger.observation.call_hash`; :meth:`_pair_tool_call`)."""
        self.live_calls: dict[str, str] = {}
        """``call:{hash}:{n}`` of a hook's call that has no id another source shares ->
        its ``tool_use_id`` (:meth:`_note_call`)."""
        self.file_calls: dict[str, str] = {}
        """``call:{hash}:{n}`` of a call recorded from a file or stream -> its
        ``tool_use_id``."""
        self.file_call_n: dict[str, int] = {}
        """Per call hash: the n of the last call recorded from a file or stream."""
        self.call_alias_of: dict[str, str] = {}
        """``tool_use_id`` -> the ``call:{hash}:{n}`` alias of its start (also a hook's
        own id when its start was captured again)."""
        self.completed_calls: set[str] = set()
        """``tool_use_id`` of aliased calls whose completion is recorded."""
        self.derived_starts: dict[str, str] = {}
        """Keys of starts a completion stood for -> the ``tool_use_id`` the call is
        recorded under: a start derived from the completion (:meth:`_start_unseen_call`),
        or the start ``tool:{id}:start`` of a hook call with an id whose completion met a
        file's call before it (:meth:`_call_before_its_start`). That start arriving
        later is the call's late start (:meth:`_keep_late_start`)."""
        self.late_pairs: dict[str, str] = {}
        """Id-less hook calls whose completion came first and whose start has not
        arrived yet, oldest first: the key of the start derived from the completion
        (:meth:`_start_unseen_call`), or the ``call:{hash}:{n}`` of the file's call the
        completion met (:meth:`_call_before_its_start`) -> call hash (:meth:`_late_pair`)."""
        self.running_usage: dict[str, dict[str, int]] = {}
        """Per source format of ``_RUNNING_TOTAL_SOURCES``: the tokens recorded so far."""
        self.liveness = Liveness()
        self._now = self.created_on

    # -- construction -------------------------------------------------------------

    @classmethod
    def open(cls, first: Observation, recorded_at: datetime) -> Session:
        """Create the stream for ``first.session`` (event key ``"opened"``)."""
        ref = first.session
        fields: dict[str, Any] = {
            "originator_topic": get_topic(cls),
            "originator_id": ref.id,
            "originator_version": 1,
            "timestamp": recorded_at,
            "event_key": "opened",
            "agent": ref.agent,
            "source_format": first.source_format,
            "source_version": first.source_version,
            "occurred_at": first.occurred_at,
            "status": S.CREATED,
            "external_id": ref.external_id,
            "parent_id": ref.parent_id,
            "agent_type": ref.agent_type,
            "cwd": ref.cwd,
        }
        event = cls.Opened(**fields)
        return start_stream(event, Session)

    # -- commands -----------------------------------------------------------------

    def observe(self, obs: Observation, recorded_at: datetime) -> int:
        """Append the fact unless its key (or an alias) is already in the stream.

        Returns the number of events appended (0 for a duplicate; 2 when the fact
        reopened an ended session).
        """
        seen = self.seen_keys
        live_call = obs.kind in _CALL_KINDS and _live_capture(obs.source_format) == "hook"
        if live_call and obs.record_key is not None and obs.record_key in seen:
            return 0  # a redelivery of this capture (same capture key)
        if obs.key in seen or (obs.alias_keys and not seen.isdisjoint(obs.alias_keys)):
            if live_call and obs.key not in self.derived_starts:
                # another source (a file, another capture) recorded this call first
                self._now = recorded_at
                return self._keep_captured_again(obs, CALL_CAPTURED_AGAIN, ())
            return self._keep_late_start(obs, recorded_at)
        alias_keys = obs.alias_keys
        data = obs.data
        if "running_total" in obs.extra:
            data = self._usage_not_yet_recorded(obs)
            if data is None:
                return 0
        cls = self.EVENT_CLASSES[obs.kind]
        self._now = recorded_at
        if "pair" in obs.extra:
            late = self._late_pair(obs)
            if late is not None:
                call = self.derived_starts.get(late) or self.file_calls.get(late)
                return self._append_late_start(
                    obs, obs.record_key or obs.key, (f"{late}:late",), call or obs.data["tool_use_id"]
                )
            obs.data["tool_use_id"] = self._pair_tool_call(obs)
        if obs.kind in _CALL_KINDS:
            found = self._same_call(obs, live_call)
            if found is None:
                return 0  # a file's copy of a call a hook recorded first
            data, more, again = found
            if again is not None:
                return self._keep_captured_again(obs, CALL_CAPTURED_AGAIN, again)
            alias_keys = (*alias_keys, *more)
        hook_hash = obs.extra.get("hook_prompt_hash")
        if obs.kind == "PromptSubmitted" and hook_hash is not None:
            alias = self.live_alias("prompt", hook_hash, obs.source_format)
            if alias in self.seen_keys:  # before a Reopened: a duplicate changes nothing
                return self._keep_captured_again(obs, PROMPT_CAPTURED_AGAIN, (alias,))
            alias_keys = (*alias_keys, alias)
        batch = self._batch_for(obs)
        if obs.kind == "ToolCallCompleted":
            batch = self._call_batch(data, live_call, batch)
        historical = self._is_historical(obs, batch)
        appended = 0
        if self.cwd is None and obs.session.cwd:
            self._append(
                Session.CwdLearned, obs, key=f"cwd:{obs.key}", status=self.status,
                batch=self.batch, raw=None, data={"cwd": obs.session.cwd},
            )
            appended += 1
        if obs.kind in _ACTIVITY and self.status in ENDED_STATES and not historical:
            self._append(
                Session.Reopened,
                obs,
                key=f"reopened:{obs.key}",
                status=S.ACTIVE,
                batch=self.batch,
                raw=None,
                data={
                    "reason": f"{obs.kind} after the session was {self.status.value.lower()}"
                    + self.liveness.reopen_note(),
                    "from_status": self.status,
                    "cause_key": obs.key,
                },
            )
            appended += 1
        late_task = self.batch == 0 and obs.kind == "PromptSubmitted" and obs.data.get("prompt_kind") == "task"
        if obs.kind == "PromptSubmitted" and (late_task or not historical) and opens_batch(obs.data):
            batch = self.batch + 1
        status = self.status if historical else _next_status(self.status, obs)
        if obs.kind == "ToolCallCompleted":
            appended += self._start_unseen_call(obs, data, status, batch)
        before = self._unattached() if late_task else None
        self._append(
            cls, obs, key=obs.key, status=status, batch=batch, raw=obs.raw, data=data,
            alias_keys=alias_keys,
        )
        if before is not None:
            appended += self._task_prompt_arrived_late(obs, recorded_at, before)
        return appended + 1

    def _unattached(self) -> dict[str, Any]:
        """The liveness's unattached activity (the ``ActivitiesAttached`` payload) now."""
        lv = self.liveness
        return {
            "versions": tuple(lv.unattached),
            "tool_use_ids": tuple(lv.unattached_tool_use_ids),
            "tool_errors": lv.unattached_errors,
            "first_activity_at": lv.first_unattached_at,
        }

    def _task_prompt_arrived_late(
        self, obs: Observation, recorded_at: datetime, before: dict[str, Any]
    ) -> int:
        """A subagent's task prompt (its run's first input) recorded after the run's
        activity (rule :data:`LATE_TASK_PROMPT`: its transcript imported after the hooks
        that recorded its tool calls and its ``SubagentStop``) opened batch 1 (the
        prompt is history when the run had ended: the state stays). The activity recorded
        before it (batch 0, ``before``) followed it: an ``ActivitiesAttached``
        (``recovery``: recorded before any prompt) attaches it to batch 1; a run that had
        ended ended that batch there: a ``BatchClosed`` (reason ``session_end``,
        ``measured_from`` the end). Transcript first, the same facts land in batch 1 as
        they come. Returns the events appended."""
        evidence = {
            "rule": LATE_TASK_PROMPT, "threshold_s": 0, "last_version": self.version,
            "decided_at": recorded_at,
        }
        appended = 0
        if before["versions"]:
            self._append(
                Session.ActivitiesAttached, obs, key=f"{LATE_TASK_PROMPT}:{obs.key}:attached",
                status=self.status, batch=self.batch, raw=None,
                data={**evidence, "recovery": True, **before},
            )
            appended += 1
        if self.status in ENDED_STATES and self.batch_open:
            self._append(
                Session.BatchClosed, obs, key=f"{LATE_TASK_PROMPT}:{obs.key}:closed",
                status=self.status, batch=self.batch, raw=None,
                data={**evidence, "reason": "session_end", "measured_from": self.ended_at},
            )
            appended += 1
        return appended

    def _usage_not_yet_recorded(self, obs: Observation) -> dict[str, Any] | None:
        """The payload of a ``UsageRecorded`` whose tokens are a thread's running total as
        one agent process first reported it (``extra["running_total"]``; ``codex exec
        --json``, whose ``codex exec resume`` continues the thread's earlier total): the
        tokens less what this session already recorded from that source, so a resumed
        thread's earlier turns are not counted again. A total below what was recorded in
        any count is the process's own (it counted from zero) and is recorded whole; one
        equal to it records nothing (None)."""
        before = self.running_usage.get(obs.source_format)
        if not before:
            return obs.data
        tokens = {k: int(obs.data.get(k, 0)) - before.get(k, 0) for k in TOKENS}
        if any(v < 0 for v in tokens.values()):
            return obs.data
        if not any(tokens.values()):
            return None
        return {**obs.data, **tokens}

    def _keep_late_start(self, obs: Observation, recorded_at: datetime) -> int:
        """The real start of a tool call whose start was derived from its completion
        (it arrived later: e.g. a remote hook's ``PreToolUse`` spooled while the server
        was down, its ``PostToolUse`` sent directly), or of a hook call with an id whose
        completion met a file's copy of the call before it (:attr:`derived_starts`), is
        no new fact, but its record is kept: a :class:`Session.LateStartObserved` with
        its raw payload, key ``<start key>:late`` (an id-less hook's start, paired by
        tool and input: :meth:`_late_pair`). Anything else already seen appends
        nothing. Returns the events appended."""
        key = f"{obs.key}:late"
        if (
            obs.kind != "ToolCallStarted"
            or obs.key not in self.derived_starts
            or obs.raw is None
            or key in self.seen_keys
        ):
            return 0
        self._now = recorded_at
        return self._append_late_start(obs, key, (), self.derived_starts[obs.key])

    def _append_late_start(
        self, obs: Observation, key: str, alias_keys: tuple[str, ...], tool_use_id: str
    ) -> int:
        """Append the :class:`Session.LateStartObserved` (:data:`LATE_START`, raw payload,
        the start's tool and input) of a start that arrived after its completion, for
        the call recorded as ``tool_use_id``. Returns 1."""
        self._append(
            Session.LateStartObserved, obs, key=key, status=self.status,
            batch=self._batch_for(obs), raw=obs.raw, alias_keys=alias_keys,
            data={
                "record_type": LATE_START,
                "tool_use_id": tool_use_id,
                "tool_name": obs.data.get("tool_name"),
                "tool_input": obs.data.get("tool_input"),
            },
        )
        return 1

    def _late_pair(self, obs: Observation) -> str | None:
        """The call an id-less hook's start arriving after its completion belongs to: the
        oldest of :attr:`late_pairs` of the same tool and input (``extra["pair"]``), its
        derived start's key or the file call's ``call:`` alias. None for any other
        observation. Such a start is kept as a :data:`LATE_START` record, key its own
        capture key (a redelivery appends nothing), alias ``<that key>:late``, not
        appended as a second call. A start of a new call of the same tool and input
        that arrives while such a completion waits for its start is taken for that
        start: its own completion then derives its start, so the calls are still
        counted once each."""
        if obs.kind != "ToolCallStarted" or not self.late_pairs:
            return None
        pair = obs.extra["pair"]
        return next((k for k, h in self.late_pairs.items() if h == pair), None)

    def _keep_captured_again(
        self, obs: Observation, record_type: str, alias_keys: tuple[str, ...]
    ) -> int:
        """A live capture's fact (a hook's, ``hookledger run``'s) that another source
        recorded first is no new fact, but its capture is kept: a
        :class:`Session.RecordObserved` (``record_type``: :data:`PROMPT_CAPTURED_AGAIN`,
        :data:`CALL_CAPTURED_AGAIN`), its raw payload, keyed by its own record key, with
        the aliases it matched (``alias_keys``), in the batch of a prompt it matched,
        else the batch it arrived in. A ``prompt:`` or ``call:`` start alias counts
        toward the capture's occurrences (:meth:`live_alias`), so its next prompt of the
        same text, or next call of the same tool and input, meets the next copy, not
        this one again. Returns 1."""
        prompt = next((k for k in alias_keys if k.startswith("prompt:")), None)
        self._append(
            Session.RecordObserved, obs, key=obs.record_key or obs.key, status=self.status,
            batch=self.batch_of_key.get(prompt, self.batch) if prompt else self._batch_for(obs),
            raw=obs.raw, data={"record_type": record_type}, alias_keys=alias_keys,
        )
        return 1

    def _same_call(
        self, obs: Observation, live: bool
    ) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...] | None] | None:
        """Meet a tool call's start or completion with the other sources' copies of the
        same call when the sources share no id: a hook's call without an id (Claude Code
        2025 builds, Gemini CLI, OpenClaw without ``toolCallId``) or with one the file
        does not hold (Cursor), and a file's or stream's call. Both sides name the n-th
        call of the same tool and input ``call:{hash}:{n}``: a hook by counting its
        session's hook calls (:meth:`live_alias`), a file by counting its own
        (``extra["call_alias"]``, or the alias it stores:
        :class:`ledger.sources.adapter_kit.CallCounter`).

        Returns None when the observation is a file's copy of a call a hook recorded
        first (nothing is appended, as for any duplicate of a file); else ``(data,
        alias keys to add, None)``, the payload under the ``tool_use_id`` the call was
        recorded under, or ``(data, (), aliases)`` when it is a hook's copy of a call
        another source recorded first (:meth:`_keep_captured_again`)."""
        data = obs.data
        own = data.get("tool_use_id")
        if obs.kind == "ToolCallStarted":
            if live:
                if not ("hook_call_hash" in obs.extra or "pair" in obs.extra):
                    return data, (), None  # its id is the file's too: met by key
                h = obs.extra.get("hook_call_hash") or _hash_of(data)  # Cursor: its own spelling
                alias = self.live_alias("call", h, obs.source_format)
                if alias in self.file_calls:
                    return data, (), (alias, f"tool:{own}:start")
                return data, (alias,) if "hook_call_hash" in obs.extra else (), None
            alias = _file_alias(obs)
            if alias is not None and alias in self.live_calls:
                return None
            return data, (), None
        if live:
            start = self.call_alias_of.get(own) if isinstance(own, str) else None
            if start is None:
                return self._call_before_its_start(obs, data)
            recorded = self.file_calls.get(start) or self.live_calls.get(start) or own
            if recorded in self.completed_calls:
                return data, (), (f"{start}:end",)
            if recorded != own:
                data = {**data, "tool_use_id": recorded}
            return data, (f"{start}:end",) if "hook_call_hash" in obs.extra else (), None
        alias = _file_alias(obs)
        recorded = self.live_calls.get(alias.removesuffix(":end")) if alias else None
        if recorded is None:
            return data, (), None
        if recorded in self.completed_calls:
            return None
        return {**data, "tool_use_id": recorded}, (), None

    def _call_before_its_start(
        self, obs: Observation, data: dict[str, Any]
    ) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...] | None]:
        """A hook's completion whose start the hooks have not delivered (none is open), in
        :meth:`_same_call`'s terms, when it names its tool and input: an id-less hook's
        (``extra["pair"]``) or a Cursor ``postToolUse`` (``extra["hook_call_hash"]``).
        When a file recorded the hooks' next call of that tool and input
        (``call:{hash}:{n}``), the completion is that call's: recorded under the file's
        ``tool_use_id``, or kept as :data:`CALL_CAPTURED_AGAIN` when the file has its
        completion, with the aliases ``call:{hash}:{n}`` and ``…:end``: it stands for
        the hooks' start too (it counts toward their n) and the start arriving later is
        its :data:`LATE_START` (an id-less one by tool and input: :meth:`_late_pair`; a
        Cursor one by its own start key ``tool:{id}:start``, the completion's third
        alias: :meth:`_keep_late_start`). Otherwise nothing meets it and its start is
        derived (:meth:`_start_unseen_call`): a Cursor completion then takes the alias
        ``call:{hash}:{n}:end`` and its derived start ``call:{hash}:{n}``, as when its
        ``preToolUse`` came first, so a transcript imported later meets the call."""
        pair = obs.extra.get("pair") or obs.extra.get("hook_call_hash")
        if pair is None:
            return data, (), None
        alias = self.live_alias("call", pair, obs.source_format)
        recorded = self.file_calls.get(alias)
        own_start = _own_start_key(obs)
        if recorded is None:
            return data, (f"{alias}:end",) if own_start else (), None
        met = (alias, f"{alias}:end", *((own_start,) if own_start else ()))
        if recorded in self.completed_calls:
            return data, (), met
        return {**data, "tool_use_id": recorded}, met, None

    def _call_batch(self, data: dict[str, Any], live: bool, batch: int) -> int:
        """The batch of a completion of a call another source recorded (a hook's of a
        file's call, a file's of a hook's: :meth:`_same_call`): its start's, not the one
        the completion arrived in (a hook's ``postToolUse`` replayed after a transcript
        that holds later prompts, say). Else ``batch``."""
        start = self.call_alias_of.get(data.get("tool_use_id"))  # type: ignore[arg-type]
        if start is None or (start in self.file_calls) != live:
            return batch
        return self.batch_of_key.get(start, batch)

    def _start_unseen_call(
        self, obs: Observation, data: dict[str, Any], status: SessionStatus, batch: int
    ) -> int:
        """A completion whose start this stream never saw (a ``PostToolUse`` without its
        ``PreToolUse``: hooks installed while the tool ran, a ``PreToolUse`` matcher
        narrower than the ``PostToolUse`` one) is still a tool call: append its
        :class:`Session.ToolCallStarted` first, derived from the completion (the tool's
        input when the source gave it, no raw record, ``record_key`` ``derived:…``),
        under the start's own key, so the real start arriving later adds no second start
        (:meth:`_keep_late_start` keeps its record; an id-less hook's start, a Claude
        Code 2025 ``PreToolUse``, is recognised by tool and input: :meth:`_late_pair`).
        A completion met with a call another source recorded (:meth:`_same_call`) has
        its start. ``data``: the completion's payload as recorded. Returns the events
        appended."""
        tool_use_id = data.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            return 0
        if tool_use_id in self.call_alias_of:
            return 0
        alias_keys: tuple[str, ...] = ()
        if "pair" in obs.extra:  # 2025 hooks: started iff paired with an open start
            if tool_use_id in self.unpaired_calls:
                return 0
            key = f"{obs.key}:start"
        else:
            key = f"tool:{tool_use_id}:start"
            if key in self.seen_keys:
                return 0
            if _own_start_key(obs):  # a Cursor call: the alias its start would have had
                alias_keys = (self.live_alias("call", obs.extra["hook_call_hash"], obs.source_format),)
        self._append(
            Session.ToolCallStarted, obs, key=key, status=status, batch=batch, raw=None,
            alias_keys=alias_keys, record_key=f"derived:{obs.record_key or obs.key}",
            data={
                "tool_use_id": tool_use_id,
                "tool_name": obs.data.get("tool_name") or "(unknown)",
                "tool_input": obs.extra.get("tool_input"),
            },
        )
        return 1

    def live_alias(self, family: str, h: str, source_format: str) -> str:
        """The alias ``{family}:{h}:{n}`` of a live capture's next sighting (hooks, or
        ``hookledger run``'s command line: :func:`_live_capture`) of a prompt text
        (``prompt``) or a tool call's name and input (``call``) of hash ``h``: n counts
        that capture's sightings of it in this session, those another source recorded
        first included. A file numbers its own occurrences; the n-th sighting of each
        source meets the others on that alias."""
        n = self.live_counts.get((_live_capture(source_format), f"{family}:{h}"), 0) + 1
        return f"{family}:{h}:{n}"

    # -- internals ----------------------------------------------------------------

    def _pair_tool_call(self, obs: Observation) -> str:
        """Tool-call id for hook payloads that carry none (2025 builds, Gemini CLI, OpenClaw
        without ``toolCallId``): a Pre gets ``hook-<capture>``; a Post takes the oldest
        open Pre of the same tool and input (``extra["pair"]``, a call hash): the id of
        the call another source recorded when that Pre was captured again."""
        own = "hook-" + obs.key.removeprefix("hook:")
        if obs.kind == "ToolCallStarted":
            return own
        pair = obs.extra["pair"]
        for tool_use_id, open_pair in self.unpaired_calls.items():
            if open_pair == pair:
                return tool_use_id
        return own

    def _batch_for(self, obs: Observation) -> int:
        if obs.after_prompt == BEFORE_FIRST_PROMPT:
            return 0
        if obs.after_prompt is not None and obs.after_prompt in self.batch_of_key:
            return self.batch_of_key[obs.after_prompt]
        return self.batch

    def _is_historical(self, obs: Observation, batch: int) -> bool:
        """A late record of the past (e.g. a transcript imported after the hooks): it
        follows a prompt of an earlier batch, or of the current batch when that batch's
        turn already ended (a ``TurnEnded``, e.g. the hooks' stop, is in the stream), or
        no prompt of its file when the stream has one (:data:`BEFORE_FIRST_PROMPT`), or it
        happened before the session's end (``occurred_at``). A live capture's fact (a hook)
        of the end's very instant is not: it comes after the end in the log (a
        ``SessionEnd`` then a ``SessionStart`` in the same millisecond), and the log
        orders facts, not their clocks. A start (``Started``) that happened before the
        latest activity recorded (``occurred_at`` before the liveness's source time: a
        Codex or OpenClaw ``SessionStart`` spooled, or replayed from a journal, after the
        rollout's or transcript's records of the session) is history too: it neither
        rewinds the state to ACTIVE nor reopens an ended session."""
        if (
            obs.kind == "Started"
            and obs.occurred_at is not None
            and self.liveness.last_source_at is not None
            and obs.occurred_at < self.liveness.last_source_at
        ):
            return True
        if obs.after_prompt == BEFORE_FIRST_PROMPT:
            return self.batch > 0
        ended = self.status in ENDED_STATES and self.ended_at is not None
        if ended and obs.occurred_at is not None and obs.occurred_at > self.ended_at:  # type: ignore[operator]
            return False  # after the end (e.g. a turn's rest after an idle timeout): reopens
        if obs.after_prompt is not None and (
            batch < self.batch
            or (not self.batch_open and obs.after_prompt in self.batch_of_key)
        ):
            return True
        return (
            ended
            and obs.occurred_at is not None
            and (
                obs.occurred_at < self.ended_at  # type: ignore[operator]
                or (obs.occurred_at == self.ended_at and not _live_capture(obs.source_format))
            )
        )

    def _append(
        self,
        cls: type[Session.Event],
        obs: Observation,
        *,
        key: str,
        status: SessionStatus,
        batch: int,
        raw: Any,
        data: dict[str, Any],
        alias_keys: tuple[str, ...] = (),
        record_key: str | None = None,
    ) -> None:
        """Append the stream's next event: validated as ``cls(**fields)`` would be (the
        model's own validator, called without ``BaseModel.__init__``), sealed, then applied
        as ``event.mutate(self)`` would, without its originator id and version checks,
        which hold by construction here. ``record_key``: instead of the observation's
        (a derived event names its cause)."""
        if raw is not None and not isinstance(raw, str):
            raw = raw.strip().decode("utf-8") if isinstance(raw, bytes) else orjson.dumps(raw).decode()
        version = self.version + 1
        event = cls.__pydantic_validator__.validate_python(
            dict(  # a key of ``data`` that repeats an envelope field raises TypeError
                originator_id=self.id,
                originator_version=version,
                timestamp=self._now,
                event_key=key,
                alias_keys=alias_keys,
                agent=obs.session.agent,
                source_format=obs.source_format,
                source_version=obs.source_version,
                occurred_at=obs.occurred_at,
                raw=raw,
                record_key=record_key or obs.record_key,
                redactions=tuple(Redaction.model_validate(r) for r in obs.redactions)
                if obs.redactions and key == obs.key
                else (),
                status=status,
                batch=batch,
                **data,
            )
        )
        event = seal(self.head_digest, event)
        event.apply(self)
        self.version = version
        self.modified_on = event.timestamp
        self.pending_events.append(event)

    def apply_event(self, event: LedgerEvent) -> None:
        """Evolve state from one event (called by ``mutate``; no decisions here)."""
        assert isinstance(event, Session.Event)
        self.seen_keys.add(event.event_key)
        self.seen_keys.update(event.alias_keys)
        self.head_digest = event.digest
        previous_batch = self.batch
        self.status = event.status
        self.batch = max(self.batch, event.batch)
        if isinstance(event, Session.ToolCallStarted | Session.ToolCallCompleted):
            self._note_call(event)
        match event:
            case Session.PromptSubmitted():
                if event.batch > previous_batch and opens_batch({"prompt_kind": event.prompt_kind}):
                    self.batch_open = True
                for k in (event.event_key, *event.alias_keys):
                    self.batch_of_key[k] = event.batch
                self._count_live_aliases(event)
            case Session.RecordObserved() if event.record_type == PROMPT_CAPTURED_AGAIN:
                self._count_live_aliases(event)
            case Session.RecordObserved() if event.record_type == CALL_CAPTURED_AGAIN:
                self._note_call_captured_again(event)
            case Session.RecordObserved() if event.record_type == LATE_START:
                for k in event.alias_keys:
                    self.late_pairs.pop(k.removesuffix(":late"), None)
            case Session.ToolCallStarted() if (event.record_key or "").startswith("derived:"):
                self.derived_starts[event.event_key] = event.tool_use_id
                if event.tool_use_id.startswith("hook-"):
                    self.late_pairs[event.event_key] = call_hash(event.tool_name, event.tool_input)
            case Session.ToolCallStarted() if event.tool_use_id.startswith("hook-"):
                self.unpaired_calls[event.tool_use_id] = call_hash(event.tool_name, event.tool_input)
            case Session.ToolCallCompleted() if (
                event.tool_use_id in self.unpaired_calls and _live_capture(event.source_format) == "hook"
            ):  # a file's copy of the completion leaves the call open to the hook's
                del self.unpaired_calls[event.tool_use_id]
            case Session.UsageRecorded() if event.source_format in _RUNNING_TOTAL_SOURCES:
                sums = self.running_usage.setdefault(event.source_format, dict.fromkeys(TOKENS, 0))
                for k in TOKENS:
                    sums[k] += getattr(event, k)
            case Session.TurnEnded():
                if event.batch == self.batch:
                    self.batch_open = False
            case Session.Ended():
                self.batch_open = False
                self.ended_at = event.occurred_at or event.timestamp
            case Session.RunEnded() if event.status in ENDED_STATES:
                self.batch_open = False
                self.ended_at = event.occurred_at or event.timestamp
            case Session.Reopened():
                self.ended_at = None
            case Session.CwdLearned():
                self.cwd = event.cwd
            case Session.Opened():
                pass
            case _:
                pass
        self.liveness.apply(self, event)

    def _count_live_aliases(self, event: Session.Event) -> None:
        """Count a live capture's ``prompt:`` / ``call:`` start aliases (:meth:`live_alias`)."""
        capture = _live_capture(event.source_format)
        if not capture:
            return
        for k in event.alias_keys:
            family, _, rest = k.partition(":")
            if family in ("prompt", "call") and not k.endswith(":end"):
                key = (capture, f"{family}:{rest.split(':')[0]}")
                self.live_counts[key] = self.live_counts.get(key, 0) + 1

    def _note_call(self, event: Session.ToolCallStarted | Session.ToolCallCompleted) -> None:
        """Keep what :meth:`_same_call` meets a call's copies with. A hook's start without
        an id another source shares gets ``call:{hash}:{n}`` (stored for Cursor, else
        derived here: the n-th such hook call); a start from a file or stream of an agent
        whose hooks may lack ids gets the alias its file gave it (stored for Cursor,
        else derived: n follows the file's last one and the hooks' count, which a
        file's copies of hook calls, never appended, skipped). A completion closes it
        (one that stands for the hooks' start too: :meth:`_await_late_start`)."""
        tool_use_id = event.tool_use_id
        live = _live_capture(event.source_format) == "hook"
        if isinstance(event, Session.ToolCallCompleted):
            if tool_use_id in self.call_alias_of:
                self.completed_calls.add(tool_use_id)
            if live:
                if event.record_key:
                    self.seen_keys.add(event.record_key)
                self._await_late_start(event)
            return
        if live:
            if event.record_key:
                self.seen_keys.add(event.record_key)
            stored = next((k for k in event.alias_keys if k.startswith("call:")), None)
            if stored is None and not tool_use_id.startswith("hook-"):
                return  # its id is the file's too
            h = stored.split(":")[1] if stored else call_hash(event.tool_name, event.tool_input)
            count = ("hook", f"call:{h}")
            n = self.live_counts.get(count, 0) + 1
            self.live_counts[count] = n
            alias = f"call:{h}:{n}"
            self.live_calls.setdefault(alias, tool_use_id)
            self.batch_of_key[alias] = event.batch
            self.call_alias_of[tool_use_id] = alias
            return
        if event.agent not in _IDLESS_HOOK_AGENTS:
            return
        stored = next((k for k in event.alias_keys if k.startswith("call:")), None)
        if stored is not None:
            h, n = stored.split(":")[1], int(stored.split(":")[2])
        else:
            h = call_hash(event.tool_name, event.tool_input)
            n = max(self.file_call_n.get(h, 0), self.live_counts.get(("hook", f"call:{h}"), 0)) + 1
        self.file_call_n[h] = max(self.file_call_n.get(h, 0), n)
        alias = f"call:{h}:{n}"
        self.file_calls.setdefault(alias, tool_use_id)
        self.batch_of_key.setdefault(alias, event.batch)
        self.call_alias_of.setdefault(tool_use_id, alias)

    def _await_late_start(self, event: Session.Event) -> bool:
        """A hook's completion that met a file's call before the hooks delivered its start
        (:meth:`_call_before_its_start`: aliases ``call:{hash}:{n}`` and ``…:end``)
        counts as the hooks' n-th call of that tool and input, and waits for its start:
        by tool and input (:meth:`_late_pair`), or by its own start key when it names
        one (``tool:{id}:start``, a Cursor hook's: :attr:`derived_starts`). Returns
        whether the event was one."""
        start = next((k for k in event.alias_keys if k.startswith("call:") and not k.endswith(":end")), None)
        if start is None or f"{start}:end" not in event.alias_keys:
            return False
        self._count_live_aliases(event)
        own = next((k for k in event.alias_keys if k.startswith("tool:")), None)
        if own is not None:
            self.derived_starts[own] = self.file_calls.get(start) or getattr(event, "tool_use_id", "")
        else:
            self.late_pairs[start] = start.split(":")[1]
        return True

    def _note_call_captured_again(self, event: Session.RecordObserved) -> None:
        """A hook's copy of a call another source recorded (:meth:`_keep_captured_again`):
        a start counts toward the hook's calls of its tool and input and leads the hook's
        own id (``tool:{id}:start`` among its aliases; an id-less hook's ``hook-…`` is
        then paired with the recorded call) to the recorded call, which the hook's
        completion then closes."""
        start = next((k for k in event.alias_keys if k.startswith("call:")), None)
        if start is None:
            return
        if start.endswith(":end"):  # the recorded call's completion: no longer open
            start = start.removesuffix(":end")
            recorded = self.file_calls.get(start) or self.live_calls.get(start)
            self.unpaired_calls.pop(recorded, None)  # type: ignore[arg-type]
            return
        if self._await_late_start(event):
            return
        self._count_live_aliases(event)
        mine = next((k for k in event.alias_keys if k.startswith("tool:")), None)
        if mine is None:
            return
        own = mine[len("tool:") : -len(":start")]
        self.call_alias_of[own] = start
        recorded = self.file_calls.get(start)
        if own.startswith("hook-") and recorded is not None:
            self.unpaired_calls[recorded] = start.split(":")[1]  # its completion pairs with it


def opens_batch(data: dict[str, Any]) -> bool:
    """Human prompts and subagent task prompts open a prompt batch."""
    return data.get("prompt_kind", "human") in BATCH_OPENERS


PROMPT_CAPTURED_AGAIN = "prompt captured again"
"""``record_type`` of a live capture's copy of a prompt another source recorded first."""

CALL_CAPTURED_AGAIN = "tool call captured again"
"""``record_type`` of a hook's copy of a tool call's start or completion another source
recorded first."""

LATE_TASK_PROMPT = "late_task_prompt"
"""``rule`` of the decisions a subagent's task prompt recorded after its run's activity
makes (:meth:`Session._task_prompt_arrived_late`)."""

LATE_START = "tool call start after its completion"
"""``record_type`` of a tool call's start that arrived after its completion, whose start
was derived from it (:meth:`Session._keep_late_start`, :meth:`Session._late_pair`)."""

_CALL_KINDS = frozenset({"ToolCallStarted", "ToolCallCompleted"})

_IDLESS_HOOK_AGENTS = frozenset({"claude-code", "gemini", "openclaw", "cursor"})
"""Agents whose hooks may give a tool call no id its files share (Claude Code 2025
builds, Gemini CLI, OpenClaw without ``toolCallId``, Cursor): their files' calls get a
``call:`` alias (:meth:`Session._note_call`)."""


def _hash_of(data: dict[str, Any]) -> str:
    return call_hash(data.get("tool_name") or "(unknown)", data.get("tool_input"))


def _own_start_key(obs: Observation) -> str | None:
    """``tool:{id}:start`` of a Cursor hook's completion ``tool:{id}:end`` that names its
    tool and input (``extra["hook_call_hash"]``): the key its start arrives under.
    None for any other observation."""
    if obs.extra.get("hook_call_hash") is None or obs.kind != "ToolCallCompleted":
        return None
    if not (obs.key.startswith("tool:") and obs.key.endswith(":end")):
        return None
    return obs.key.removesuffix(":end") + ":start"


def _file_alias(obs: Observation) -> str | None:
    """The ``call:{hash}:{n}`` (``:end`` for a completion) a file gave this call: stored
    (Cursor) or only handed over (``extra["call_alias"]``)."""
    alias = obs.extra.get("call_alias")
    if alias is not None:
        return alias  # type: ignore[no-any-return]
    return next((k for k in obs.alias_keys if k.startswith("call:")), None)


def _live_capture(source_format: str) -> str:
    """``hook`` for hook payloads, ``run`` for ``hookledger run``'s prompt, else ``""``."""
    if source_format.endswith(".hook"):
        return "hook"
    return "run" if source_format == "hookledger.run" else ""


_RUN_OUTCOMES = {"completed": S.COMPLETED, "failed": S.FAILED, "terminated": S.TERMINATED}
_KEPT_ON_END = frozenset({S.TERMINATED, S.ARCHIVED})
"""States an operator's command (or the archive job) put the session in: the agent's own
end (``SessionEnd``, a run's outcome) arriving later is recorded, the state is kept."""
_KEPT_ON_SESSION_END = _KEPT_ON_END | {S.FAILED}
"""A ``SessionEnd`` (``Ended``) keeps these too: an agent process that failed (an error
result, a non-zero exit) still ends its session, and says no more than that it ended,
so the failure stays the session's outcome (DESIGN.md: SessionEnd -> COMPLETED, an error
result -> FAILED; it names no move from FAILED to COMPLETED)."""


def _next_status(current: SessionStatus, obs: Observation) -> SessionStatus:
    """Map an observed fact onto the lifecycle (DESIGN.md); observed facts never fail."""
    kind = obs.kind
    if kind in ("Ended", "RunEnded") and current in _KEPT_ON_END:
        return current
    if kind == "Ended" and current in _KEPT_ON_SESSION_END:
        return current
    if kind == "Ended":
        return S.COMPLETED
    if kind == "RunEnded":
        return _RUN_OUTCOMES.get(obs.data.get("outcome"), current)  # type: ignore[arg-type]
    if kind == "Started":
        return S.ACTIVE
    if kind == "PromptSubmitted":
        return S.PROCESSING
    if kind == "TurnEnded":
        return S.WAITING
    if kind == "Suspended" and current not in ENDED_STATES:
        return S.PAUSED
    if kind == "Resumed" and current is S.PAUSED:
        return S.ACTIVE
    if current in ENDED_STATES:
        # Reopened just moved an ended session to ACTIVE; anything else stays.
        return current
    if current is S.PAUSED:
        return current
    if kind == "AssistantReplied":
        return S.WAITING if obs.data.get("stop_reason") == "end_turn" else S.PROCESSING
    if kind in ("ToolCallStarted", "ToolCallCompleted"):
        return S.PROCESSING
    if kind in ("NotificationReceived", "PermissionRequested"):
        ntype = obs.data.get("notification_type")
        if kind == "PermissionRequested" or ntype in ("idle_prompt", "permission_prompt"):
            return S.WAITING
    return current


Session.EVENT_CLASSES.update(
    {
        name: cls
        for name, cls in vars(Session).items()
        if isinstance(cls, type) and issubclass(cls, Session.Event) and cls is not Session.Event
    }
)
