"""Model routing for one message (E22): the agent's rules, applied before each turn.

Rules come with the resolved agent (``ResolvedAgent.routes``, ordered by priority);
a rule with a channel applies only to that channel's messages. The session's
``/model`` choice beats every rule (the caller checks it first).
"""

from __future__ import annotations

from agents.engine.routing import route_model
from agents.models import Run
from agents.runtime.resolution import ModelConfig, ResolvedAgent


def choose_model(agent: ResolvedAgent, channel: str, text: str) -> tuple[ModelConfig, str]:
    """The model for ``text`` and why: ``"rule:<name>"`` or ``"default"``."""
    if not agent.routes:
        return agent.model, "default"
    applicable = [r for r in agent.routes if not r.channel or r.channel == channel]
    by_hint = {r.rule.hint: r for r in applicable}
    decision = route_model(
        text,
        default=agent.model,
        rules=[r.rule for r in applicable],
        routes={hint: r.model for hint, r in by_hint.items()},
    )
    if decision.source == "rule" and decision.hint in by_hint:
        return decision.choice, f"rule:{by_hint[decision.hint].name}"[:120]
    return decision.choice, "default"


def record_run_model(run_id: str, model: ModelConfig, route: str) -> None:
    """Write the chosen model and the reason on the run (shown in the admin and API)."""
    if str(run_id).isdigit():
        Run._base_manager.filter(pk=int(run_id)).update(
            model_name=f"{model.provider_name}:{model.model}"[:300], model_route=route[:120]
        )
