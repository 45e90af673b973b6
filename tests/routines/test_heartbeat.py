"""/heartbeat (C8, S4): silent without a model call when HEARTBEAT.md has nothing to
do, silent when the model answers HEARTBEAT_OK, the finding when there is one."""

from __future__ import annotations

import asyncio

import pytest

from agents.actions.config import do_save_agent_file
from agents.actions.conversation import do_create_session
from agents.routines.heartbeat import NOTHING_FOUND, NOTHING_TO_DO, has_work
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def chat(session, text):
    async def run():
        try:
            return await handle_message(session.pk, text)
        finally:
            await close_providers()

    return asyncio.run(run())


def model_calls(fake_llm) -> int:
    return len([r for r in fake_llm.requests if r.json.get("messages")])


def test_what_counts_as_nothing_to_do():
    assert not has_work("")
    assert not has_work("# Heartbeat\n\n<!-- add checks here -->\n- [ ]\n")
    assert has_work("# Heartbeat\n- [ ] check the backups finished\n")


def test_heartbeat_is_silent_when_the_file_is_empty_or_the_reply_is_ok(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="hb")
    do_save_agent_file(live_agent.agent, "HEARTBEAT.md", "# Heartbeat\n<!-- nothing yet -->\n")
    before = model_calls(fake_llm)
    reply = chat(session, "/heartbeat")
    assert reply.text == NOTHING_TO_DO
    assert model_calls(fake_llm) == before  # no LLM call

    do_save_agent_file(
        live_agent.agent, "HEARTBEAT.md", "- check that the nightly export ran", user=live_agent.member
    )
    fake_llm.script(FakeTurn(text="HEARTBEAT_OK"), FakeTurn(text="The nightly export did not run."))
    assert chat(session, "/heartbeat").text == NOTHING_FOUND
    assert "nightly export" in fake_llm.requests[-1].json["messages"][-1]["content"]
    assert chat(session, "/heartbeat").text == "The nightly export did not run."
