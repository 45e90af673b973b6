"""One charged light call of the memory jobs (the reflector, the review): through the
budget guard, on the agent's light model; a refusal or a provider failure is the
call's readable error, never an exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.budgets.errors import BudgetRefused
from agents.budgets.scope import charge_for_run, charging
from agents.engine.light import complete_light
from agents.engine.types import LLMRequest, ProviderError


@dataclass
class LightAnswer:
    reply: str = ""
    error: str = ""
    records: list[Any] = field(default_factory=list)  # usage of every attempt, failed ones too


async def charged_light_call(
    request: LLMRequest, agent: Any, light: Any, *, tenant_id: int, user_id: int | None
) -> LightAnswer:
    from agents.runtime.llm import model_spec  # the runtime imports the memory package

    charge = charge_for_run(tenant_id=tenant_id, user_id=user_id, agent_id=agent.agent_id)
    try:
        with charging(charge):
            answer = await complete_light(
                request, main=model_spec(agent.model), cheap=model_spec(light) if light else None
            )
    except (BudgetRefused, ProviderError) as exc:
        return LightAnswer(error=getattr(exc, "message", "") or str(exc) or type(exc).__name__)
    return LightAnswer(reply=answer.response.message.text, records=answer.records)
