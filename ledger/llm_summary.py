"""The optional LLM summariser: an OpenAI-compatible chat completions API under a budget.

Speaks ``POST {base_url}/chat/completions`` through the ``openai`` client library
(``pip install 'hookledger[llm]'``), so it works with OpenAI and with local servers that
serve the same API (llama.cpp ``llama-server``, Ollama ``/v1``, vLLM). The request asks
for one JSON object with the fields of :class:`~ledger.summary.SummaryDraft`; the
deterministic facts (files read and edited, failed commands) are always the ledger's own,
never the model's, and an observation's ``files`` keeps only files the ledger saw read or
edited.

Budget (:class:`LLMConfig`): tokens (prompt + completion, as the server reports them; the
pre-call estimate when it reports none) per UTC day over all sessions and per session. A call is made only when the estimated cost of
the request fits what is left of both; otherwise the caller keeps the deterministic
summary and records why (``budget_exhausted:day`` / ``budget_exhausted:session``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ledger.envelope import MemoryObservation
from ledger.summary import MAX_ITEMS, SummaryDraft, SummaryFacts, clip, shell_command, tool_paths

PROMPT_CHARS = 12_000
"""Characters of rendered facts sent to the model at most (about 3,000 tokens)."""

SYSTEM_PROMPT = (
    "You summarise one unit of work of an AI coding agent (a prompt batch or a whole "
    "session) for the engineers who will continue it. Reply with ONLY a JSON object with "
    'the keys "request" (string: what was asked), "investigated", "learned", "completed", '
    '"next_steps" (arrays of short sentences), and "observations" (array of objects with '
    '"kind" (one of gotcha, decision, bug_fix, trade_off, discovery), "title" (one line), "detail" '
    '(at most two sentences) and "files" (array of paths)). Use only the facts given.'
)


@dataclass(frozen=True)
class LLMConfig:
    """Where and how much: ``base_url`` (e.g. ``http://127.0.0.1:8080/v1``), ``model``,
    ``api_key`` (None for local servers), ``day_tokens`` / ``session_tokens`` (budgets in
    tokens), ``max_output_tokens`` (per request), ``timeout_s`` (seconds per request)."""

    base_url: str
    model: str
    api_key: str | None = None
    day_tokens: int = 200_000
    session_tokens: int = 20_000
    max_output_tokens: int = 800
    timeout_s: float = 30.0


@dataclass(frozen=True)
class LLMResult:
    """A model's summary and what it cost: tokens as reported by the server, or, when it
    reported none (``estimated``), the pre-call estimate (:func:`call_estimate`)."""

    draft: SummaryDraft
    model: str
    input_tokens: int
    output_tokens: int
    estimated: bool = False


class SummariserUnavailable(Exception):
    """The LLM summariser gave no usable summary. ``reason`` is recorded in the ledger
    (``unavailable: …``, ``invalid_response: …``); ``input_tokens`` / ``output_tokens``
    are what the failed call still cost (0 when no answer came; the estimate, with
    ``estimated``, when an answer came without usage)."""

    def __init__(self, reason: str, input_tokens: int = 0, output_tokens: int = 0, estimated: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.estimated = estimated


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")

    request: str | None = None
    investigated: list[str] = []
    learned: list[str] = []
    completed: list[str] = []
    next_steps: list[str] = []
    observations: list[MemoryObservation] = []


def render_facts(facts: SummaryFacts, baseline: SummaryDraft, limit: int = PROMPT_CHARS) -> str:
    """The facts as compact text for the model, at most ``limit`` characters."""
    lines = [f"Scope: {facts.scope}"]
    lines += [f"Prompt: {clip(p, 1500)}" for p in facts.prompts[:5]]
    for tool in facts.tools:
        target = shell_command(tool) or ", ".join(tool_paths(tool)) or clip(json.dumps(tool.input, default=str), 200)
        outcome = f" -> FAILED: {clip(tool.error or '', 200)}" if tool.is_error else ""
        lines.append(f"Tool {tool.name}: {clip(target, 300)}{outcome}")
    if facts.final_message:
        lines.append(f"Final assistant message: {clip(facts.final_message, 2000)}")
    if facts.end_reason:
        lines.append(f"Ended: {facts.end_reason}")
    lines.append("Files edited: " + (", ".join(baseline.files_edited) or "none"))
    lines.append("Commands failed: " + (", ".join(baseline.commands_failed) or "none"))
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 20] + "\n[facts cut]"


def estimate_tokens(text: str) -> int:
    """A conservative token estimate for budget checks: one token per 3 characters."""
    return len(text) // 3 + 1


def call_estimate(config: LLMConfig, text: str) -> tuple[int, int]:
    """(prompt, completion) tokens a request of ``text`` is budgeted at before the call:
    the system prompt and ``text`` at one token per 3 characters, and ``max_output_tokens``."""
    return estimate_tokens(SYSTEM_PROMPT + text), config.max_output_tokens


def budget_refusal(config: LLMConfig, request_tokens: int, spent_day: int, spent_session: int) -> str | None:
    """Why a request of ``request_tokens`` (estimated prompt + max completion) may not be
    made, given the tokens already spent today and in this session; None when it fits."""
    if spent_day + request_tokens > config.day_tokens:
        return "budget_exhausted:day"
    if spent_session + request_tokens > config.session_tokens:
        return "budget_exhausted:session"
    return None


class LLMSummariser:
    """Summaries from an OpenAI-compatible chat model (see the module docstring).

    Raises (constructor) :class:`RuntimeError` when the ``openai`` package is missing.
    """

    def __init__(self, config: LLMConfig, client: Any = None) -> None:
        self.config = config
        if client is None:
            try:
                import openai
            except ImportError as e:  # pragma: no cover - depends on the install
                raise RuntimeError(
                    "HOOKLEDGER_LLM_BASE_URL is set but the openai package is missing: "
                    "pip install 'hookledger[llm]'"
                ) from e
            client = openai.OpenAI(
                base_url=config.base_url,
                api_key=config.api_key or "not-needed",
                timeout=config.timeout_s,
                max_retries=1,
            )
        self.client = client

    def request_text(self, facts: SummaryFacts, baseline: SummaryDraft) -> str:
        return render_facts(facts, baseline)

    def summarise(self, facts: SummaryFacts, baseline: SummaryDraft, text: str | None = None) -> LLMResult:
        """Ask the model; returns its summary with the deterministic facts of ``baseline``.

        Raises :class:`SummariserUnavailable` when the service cannot be reached, answers
        with an error, or answers with something that is not the requested JSON.
        """
        import openai

        text = text if text is not None else self.request_text(facts, baseline)
        try:
            response = self.client.chat.completions.create(
                model=self.config.model,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": text},
                ],
                max_tokens=self.config.max_output_tokens,
                temperature=0,
                response_format={"type": "json_object"},
            )
        except openai.APIStatusError as e:
            raise SummariserUnavailable(f"unavailable: HTTP {e.status_code}") from e
        except openai.APIError as e:  # connection refused, timeout, bad JSON envelope
            raise SummariserUnavailable(f"unavailable: {type(e).__name__}") from e
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = not (tokens_in or tokens_out)
        if estimated:  # the server said nothing about usage: charge the estimate
            tokens_in, tokens_out = call_estimate(self.config, text)
        try:
            content = response.choices[0].message.content or ""
            reply = _Reply.model_validate_json(_json_object(content))
        except (IndexError, AttributeError, ValueError, ValidationError) as e:
            raise SummariserUnavailable(
                f"invalid_response: {type(e).__name__}", tokens_in, tokens_out, estimated
            ) from e
        known = set(baseline.files_read) | set(baseline.files_edited)
        draft = SummaryDraft(
            request=clip(reply.request) if reply.request else baseline.request,
            investigated=[clip(s) for s in reply.investigated[:MAX_ITEMS]],
            learned=[clip(s) for s in reply.learned[:MAX_ITEMS]],
            completed=[clip(s) for s in reply.completed[:MAX_ITEMS]],
            next_steps=[clip(s) for s in reply.next_steps[:MAX_ITEMS]],
            files_read=baseline.files_read,
            files_edited=baseline.files_edited,
            commands_failed=baseline.commands_failed,
            observations=[
                # only files the ledger saw read or edited: never a path the model made up
                MemoryObservation(
                    kind=o.kind, title=clip(o.title), detail=clip(o.detail, 600),
                    files=tuple(f for f in o.files if f in known),
                )
                for o in reply.observations[:MAX_ITEMS]
            ],
        )
        model = str(getattr(response, "model", None) or self.config.model)
        return LLMResult(draft, model, tokens_in, tokens_out, estimated)


def _json_object(content: str) -> str:
    """The JSON object in a reply (models sometimes wrap it in a Markdown fence)."""
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    return content[start : end + 1]
