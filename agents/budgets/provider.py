"""The provider wrapper every LLM call of the product goes through.

``agents.runtime.llm.model_spec`` wraps each configured provider in a
:class:`BudgetedProvider`: before a request it reserves the worst case against the
budgets of the current charge (``agents.budgets.scope``), after it settles the real
cost -- on success, on a provider error, on a cut stream and on cancellation alike.
A call made with no charge in context (none should be) is refused when its tenant
cannot be told, never let through free.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents.budgets.errors import LLM_STOPPED, BudgetRefused
from agents.budgets.guard import Reservation, reserve, settle
from agents.budgets.scope import current_charge
from agents.engine.cost import ModelPrice, cost_of
from agents.engine.tokens import estimate_tokens
from agents.engine.types import (
    Completed,
    LLMRequest,
    LLMResponse,
    ProviderEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseDelta,
    ToolUseStart,
    Usage,
)
from claw_platform.db import db_async


def estimate_request_tokens(request: LLMRequest) -> int:
    chars = sum(
        len(t.name) + len(t.description) + len(json.dumps(t.input_schema, default=str)) for t in request.tools
    )
    tools = estimate_text_tokens_of_chars(chars)
    return estimate_tokens(request.messages, request.system) + tools


class _Meter:
    """What a call produced so far: the provider's usage once it reports it, an
    estimate from the deltas before that (a stream cut midway)."""

    def __init__(self, input_tokens: int) -> None:
        self.input_tokens = input_tokens
        self.output_chars = 0
        self.usage: Usage | None = None

    def add(self, event: ProviderEvent) -> None:
        if isinstance(event, Completed):
            self.usage = event.usage
        elif isinstance(event, TextDelta | ThinkingDelta):
            self.output_chars += len(event.text)
        elif isinstance(event, ToolUseDelta):
            self.output_chars += len(event.partial_json)
        elif isinstance(event, ToolUseStart):
            self.output_chars += len(event.name)

    def result(self, sent: bool) -> Usage:
        if self.usage is not None:
            return self.usage
        if not sent:
            return Usage()
        # Cut before the provider reported usage: the prompt was read, and what
        # streamed back was generated.
        return Usage(self.input_tokens, estimate_text_tokens_of_chars(self.output_chars))


class BudgetedProvider:
    """An ``LLMProvider`` that reserves before and settles after each call."""

    def __init__(self, inner: Any, price: ModelPrice) -> None:
        self.inner = inner
        self.price = price
        self.name = getattr(inner, "name", "")

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    async def _reserve(self, request: LLMRequest, input_tokens: int) -> Reservation:
        charge = current_charge()
        if charge is None:
            raise BudgetRefused(
                LLM_STOPPED, "This LLM call is not attributed to any team, so it was not made."
            )
        return await db_async(reserve)(
            charge,
            model=request.model,
            price=self.price,
            input_tokens=input_tokens,
            max_output_tokens=request.max_tokens,
        )

    async def _settle(self, reservation: Reservation, usage: Usage) -> None:
        if reservation.pk is None:
            return
        cost = cost_of(usage, self.price)
        # Shielded: a cancelled run still settles what its call cost.
        await asyncio.shield(db_async(settle)(reservation, cost))

    async def complete(self, request: LLMRequest) -> LLMResponse:
        input_tokens = estimate_request_tokens(request)
        reservation = await self._reserve(request, input_tokens)
        usage = Usage()
        try:
            response = await self.inner.complete(request)
            usage = response.usage
            return response
        except BaseException:
            # A failed or cancelled non-streamed call: the provider may have billed the
            # prompt; without its usage we charge nothing rather than guess.
            raise
        finally:
            await _settle_quietly(self, reservation, usage)

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        input_tokens = estimate_request_tokens(request)
        reservation = await self._reserve(request, input_tokens)
        meter = _Meter(input_tokens)
        sent = False
        inner = self.inner.stream(request)
        try:
            async for event in inner:
                sent = True
                meter.add(event)
                yield event
        finally:
            aclose = getattr(inner, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                await _settle_quietly(self, reservation, meter.result(sent))


async def _settle_quietly(provider: BudgetedProvider, reservation: Reservation, usage: Usage) -> None:
    # Shielded inside: if the task is cancelled again here, the settlement still
    # completes in the background while the cancellation goes on up.
    await provider._settle(reservation, usage)


def estimate_text_tokens_of_chars(chars: int) -> int:
    return (chars + 3) // 4
