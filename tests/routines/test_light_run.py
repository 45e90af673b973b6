"""A light run (C2, action ``light``): a fresh session each time, the agent's cheap
model and the minimal system prompt. Through the runtime and the fake LLM (OpenAI
wire). The session is made by :func:`light_session`, which the firing of a light
routine is to call (``agents.routines.firing._send``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from agents.actions.conversation import do_create_session
from agents.models import Agent
from agents.routines.light import LIGHT_CHANNEL, light_session
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.routines.helpers import make_routine

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def chat(session, text):
    async def run():
        try:
            return await handle_message(session.pk, text)
        finally:
            await close_providers()

    return asyncio.run(run())


def test_a_light_session_uses_the_cheap_model_and_the_minimal_prompt(live_agent, fake_llm):
    from agents.actions.config import do_create_model_profile

    cheap = do_create_model_profile(
        live_agent.provider, model="a-cheap-model", context_window=8_000, max_output_tokens=512
    )
    Agent._base_manager.filter(pk=live_agent.agent.pk).update(cheap_model=cheap)
    routine = make_routine(live_agent, next_run_at=NOW, action="light", name="digest")
    first, second = light_session(routine), light_session(routine)
    assert first.pk != second.pk  # a fresh session each time: no history
    assert (first.channel, first.model_override_id) == (LIGHT_CHANNEL, cheap.pk)

    fake_llm.script(FakeTurn(text="full"), FakeTurn(text="light"))
    chat(do_create_session(live_agent.agent, user=live_agent.member, title="web"), "Summarise")
    full = fake_llm.requests[-1].json
    assert chat(first, "Summarise").text == "light"
    light = fake_llm.requests[-1].json
    assert (full["model"], light["model"]) == ("a-model", "a-cheap-model")
    full_system = full["messages"][0]["content"]
    light_system = light["messages"][0]["content"]
    assert len(light_system) < len(full_system)
    assert "A assistant" in light_system or "helpful assistant" in light_system  # identity kept


def test_a_fired_light_routine_runs_in_a_light_session_on_the_cheap_model(live_agent):
    """Through the scheduler: the batch path (a user who chatted before) and a user's
    first chat (do_create_session) both give a light fire its own light session."""
    from agents.actions.config import do_create_model_profile
    from agents.models import RoutineRun, Session
    from tests.routines.helpers import tick

    cheap = do_create_model_profile(
        live_agent.provider, model="a-cheap-model", context_window=8_000, max_output_tokens=512
    )
    Agent._base_manager.filter(pk=live_agent.agent.pk).update(cheap_model=cheap)
    do_create_session(live_agent.agent, user=live_agent.member, title="chatted before")
    chatted = make_routine(
        live_agent, next_run_at=NOW, trigger="once", user=live_agent.member, action="light", name="a"
    )
    first = make_routine(
        live_agent, next_run_at=NOW, trigger="once", user=live_agent.owner, action="light", name="b"
    )
    tick(NOW)
    for routine in (chatted, first):
        row = RoutineRun._base_manager.select_related("run").get(routine=routine)
        session = Session._base_manager.get(pk=row.run.session_id)
        assert (session.channel, session.model_override_id) == (LIGHT_CHANNEL, cheap.pk)
