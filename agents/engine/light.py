"""Light work on the cheap model: titles, summaries, heartbeats (P6, E21).

IronClaw keeps a ``cheap_llm`` for lightweight tasks and falls back to the main model
when none is set; here it also falls back when the cheap model *fails*, so a broken
cheap endpoint never costs a user their title or their summary.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from agents.engine.cost import RunTotals, cost_of
from agents.engine.interfaces import EventSink, ModelSpec, NullEventSink, UsageRecord
from agents.engine.types import LLMRequest, LLMResponse, Message, ProviderError, Usage

logger = logging.getLogger("claw.engine.light")

# OpenCode's title instructions.
TITLE_SYSTEM_PROMPT = """\
You will generate a short title based on the first message a user begins a \
conversation with.
- Ensure it is not more than 50 characters long.
- The title should be a summary of the user's message.
- It should be one line long.
- Do not use quotes or colons.
- The entire text you return will be used as the title."""
TITLE_MAX_CHARS = 50
TITLE_MAX_TOKENS = 64
TITLE_INPUT_MAX_CHARS = 2_000
DEFAULT_TITLE = "New conversation"


@dataclass(slots=True)
class LightResult:
    """A light call's response, which model answered, and its usage records
    (one per attempt, failed attempts included so cost reports see them)."""

    response: LLMResponse
    model: ModelSpec
    records: list[UsageRecord] = field(default_factory=list)
    fell_back: bool = False


def _record(
    spec: ModelSpec,
    request: LLMRequest,
    usage: Usage,
    started: float,
    *,
    model: str = "",
    stop_reason: str = "",
    error: str = "",
) -> UsageRecord:
    return UsageRecord(
        provider=spec.provider_name,
        model=model or spec.model,
        purpose=request.purpose,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost=cost_of(usage, spec.price),
        latency_ms=int((time.perf_counter() - started) * 1000),
        stop_reason=stop_reason,
        error=error,
    )


async def complete_light(
    request: LLMRequest,
    *,
    main: ModelSpec,
    cheap: ModelSpec | None = None,
    totals: RunTotals | None = None,
) -> LightResult:
    """Run a non-streamed call on ``cheap``, falling back to ``main`` on a
    ``ProviderError`` (or when no cheap model is set). Raises only if ``main`` fails.

    ``request.model`` is replaced by each model's name; cost goes into ``totals``.
    """
    candidates = [cheap, main] if cheap is not None and cheap != main else [main]
    records: list[UsageRecord] = []
    for index, spec in enumerate(candidates):
        attempt = replace(request, model=spec.model)
        started = time.perf_counter()
        try:
            response = await spec.provider.complete(attempt)
        except ProviderError as exc:
            records.append(_record(spec, attempt, Usage(), started, error=exc.kind))
            if spec is main:
                raise
            logger.warning("cheap model %s failed (%s); falling back to main", spec.model, exc)
            continue
        record = _record(
            spec,
            attempt,
            response.usage,
            started,
            model=response.model,
            stop_reason=response.stop_reason,
        )
        records.append(record)
        if totals is not None:
            totals.add_call(response.usage, record.cost)
        return LightResult(response, spec, records, fell_back=index > 0)
    raise AssertionError("unreachable: the main model either answers or raises")  # pragma: no cover


# -------------------------------------------------------------------------- titles


@dataclass(slots=True)
class TitleResult:
    title: str
    records: list[UsageRecord] = field(default_factory=list)
    error: str | None = None


_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb*#"


def clean_title(raw: str, *, fallback: str = DEFAULT_TITLE) -> str:
    """One line, no quotes or colons, at most 50 characters (cut at a word)."""
    lines = [line.strip() for line in raw.strip().splitlines() if line.strip()]
    title = lines[0] if lines else ""
    title = re.sub(r"^(?:title)\s*[:\-]\s*", "", title, flags=re.I)
    title = title.strip(_QUOTES + " ").replace(":", " -")
    title = re.sub(r"\s+", " ", title).strip(_QUOTES + " .")
    if len(title) > TITLE_MAX_CHARS:
        cut = title[: TITLE_MAX_CHARS - 1]
        if " " in cut[TITLE_MAX_CHARS // 2 :]:
            cut = cut[: cut.rfind(" ")]
        title = cut.rstrip(" ,.;-") + "…"
    return title or fallback


def fallback_title(first_message: str) -> str:
    """A title without a model: the message's first words."""
    return clean_title(first_message)


async def generate_title(
    first_message: str,
    *,
    main: ModelSpec,
    cheap: ModelSpec | None = None,
    totals: RunTotals | None = None,
) -> TitleResult:
    """Title a session from its first message on the cheap model (E21, P6).

    Never raises for a provider failure: the message's first words stand in.
    """
    request = LLMRequest(
        model="",
        messages=[Message.user(first_message[:TITLE_INPUT_MAX_CHARS])],
        system=TITLE_SYSTEM_PROMPT,
        max_tokens=TITLE_MAX_TOKENS,
        temperature=0.2,
        purpose="title",
    )
    try:
        result = await complete_light(request, main=main, cheap=cheap, totals=totals)
    except ProviderError as exc:
        return TitleResult(fallback_title(first_message), error=str(exc))
    text = result.response.message.text
    return TitleResult(clean_title(text, fallback=fallback_title(first_message)), result.records)


def start_title_generation(
    first_message: str,
    *,
    main: ModelSpec,
    save: Callable[[str, list[UsageRecord]], Awaitable[None]],
    cheap: ModelSpec | None = None,
    events: EventSink | None = None,
    totals: RunTotals | None = None,
) -> asyncio.Task[TitleResult]:
    """Generate the title in the background: returns at once with the task.

    When done, ``save(title, usage_records)`` stores it and a ``title.updated`` event
    is emitted. Failures are logged, never raised into the caller's run; await the
    task before the worker's event loop ends so it is not lost.
    """
    sink = events or NullEventSink()

    async def work() -> TitleResult:
        result = await generate_title(first_message, main=main, cheap=cheap, totals=totals)
        try:
            await save(result.title, result.records)
            await sink.emit("title.updated", {"title": result.title})
        except Exception:
            logger.exception("saving the session title failed")
        return result

    return asyncio.ensure_future(work())
