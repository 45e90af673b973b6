"""What every channel shares: per-channel model and prompt overrides (CH4), personal
memory kept out of group chats (E16), delivery of a routine's output (C6), and the
split of a reply to a platform's limits within 20,000 characters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.actions.config import do_create_model_profile, do_save_agent_file
from channels_app.adapters.base import MAX_REPLY_CHARS, split_message
from channels_app.adapters.telegram.adapter import TelegramError
from channels_app.delivery import deliver_to_channel
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_telegram import SECRET, final_texts, post, update
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def system_text(request: Any) -> str:
    return json.dumps([m for m in request.json["messages"] if m["role"] == "system"])


def test_the_channels_model_and_prompt_override_reach_the_model(
    live_agent, fake_telegram, fake_llm, inline_runs
):
    override = do_create_model_profile(
        live_agent.provider, model="channel-model", context_window=32_000, max_output_tokens=1024
    )
    channel = make_channel(
        live_agent,
        "telegram",
        bot_token="123:telegram-token",
        signing_secret=SECRET,
        model_override=override,
        prompt_override="Always sign off with 'over and out'.",
    )
    link(channel, "42", live_agent.member)
    fake_llm.script(FakeTurn(text="Copy that, over and out."))
    post(channel, update("status?"))
    fake_telegram.wait_for(lambda f: "Copy that, over and out." in final_texts(f))
    request = fake_llm.requests[0]
    assert request.json["model"] == "channel-model"
    assert "over and out" in system_text(request)


def test_personal_memory_stays_out_of_group_chats(live_agent, fake_telegram, fake_llm, inline_runs):
    do_save_agent_file(
        live_agent.agent,
        "MEMORY.md",
        "- my bank PIN hint is zq-private",
        user=live_agent.member,
        acting_user=live_agent.member,
    )
    channel = make_channel(
        live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET, bot_username="claw_bot"
    )
    link(channel, "42", live_agent.member)
    fake_llm.script(FakeTurn(text="In private."), FakeTurn(text="In the group."))
    post(channel, update("hi"))
    fake_telegram.wait_for(lambda f: "In private." in final_texts(f))
    post(channel, update("@claw_bot hi all", group=True))
    fake_telegram.wait_for(lambda f: "In the group." in final_texts(f))
    private, group = fake_llm.requests
    assert "zq-private" in system_text(private)
    assert "zq-private" not in system_text(group)


def test_a_routine_delivers_its_output_to_a_channel(live_agent, fake_telegram):
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)
    ids = deliver_to_channel(channel, "-100", "Nightly report: all green.\n" * 300)
    sent = fake_telegram.calls_of("sendMessage")
    assert len(ids) == len(sent) == 2
    assert {m["chat_id"] for m in sent} == {"-100"}
    fake_telegram.fail("sendMessage", 403)
    with pytest.raises(TelegramError) as refused:
        deliver_to_channel(channel.pk, "-100", "not delivered")
    assert refused.value.retryable is False


def test_a_reply_is_split_at_breaks_and_capped_at_20000_characters():
    text = "para one\n\n" + "word " * 2000
    parts = split_message(text, 4096)
    assert all(len(p) <= 4096 for p in parts)
    assert parts[0].startswith("para one\n\nword")
    assert all(p.rstrip().endswith("word") for p in parts), "cut at a space, never inside a word"
    huge = split_message("z" * 50_000, 4096)
    assert sum(len(p) for p in huge) <= MAX_REPLY_CHARS
    assert huge[-1].endswith("[… reply cut at 20,000 characters]")
