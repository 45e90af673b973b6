"""H1: a run calls the tenant's hooks at all six events, through the Django runner
(loaded per run), and another tenant's hooks never apply."""

from __future__ import annotations

import asyncio
import json

import pytest

from agents.actions.conversation import do_create_session
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from claw_platform.audit.models import AuditEvent
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.servers.local_http import LocalServer
from tools_app.actions.extensions import do_allow_host, do_create_hook

pytestmark = pytest.mark.django_db(transaction=True)
CALLABLES = "tests.tools.hook_callables."


@pytest.fixture(autouse=True)
def _registered(settings):
    settings.CLAW_HOOK_CALLABLES = [
        CALLABLES + n for n in ("append_marker", "sync_shout", "patch_system_prompt")
    ]


def chat(session, text):
    async def run():
        try:
            return await handle_message(session.pk, text)
        finally:
            await close_providers()

    return asyncio.run(run())


def user_texts(request) -> str:
    return json.dumps([m for m in request.json["messages"] if m["role"] == "user"])


def test_a_run_applies_the_tenants_hooks_at_every_event(live_agent, tenant_b, fake_llm):
    tenant = live_agent.tenant
    with LocalServer() as receiver:
        receiver.route("POST", "/finished", 204, "")
        do_allow_host(tenant, "127.0.0.1", port=receiver.port, acting_user=live_agent.owner)
        hooks = [
            (
                "mark",
                "on_message_received",
                {
                    "kind": "python",
                    "callable": CALLABLES + "append_marker",
                    "config": {"marker": "[screened]"},
                },
            ),
            ("french", "before_llm_call", {"kind": "python", "callable": CALLABLES + "patch_system_prompt"}),
            (
                "no-calc",
                "before_tool_call",
                {
                    "kind": "python",
                    "callable": "tools_app.hooks.ready_made.block_bash",
                    "config": {"tools": ["calculate"]},
                },
            ),
            (
                "hide-time",
                "after_tool_call",
                {
                    "kind": "python",
                    "callable": "tools_app.hooks.ready_made.redact_tool_output",
                    "config": {"tools": ["get_current_time"], "replacement": "[time withheld]"},
                },
            ),
            ("shout", "on_message_sending", {"kind": "python", "callable": CALLABLES + "sync_shout"}),
            (
                "report",
                "run_finished",
                {"kind": "webhook", "url": receiver.url("/finished"), "secret": "s3cret"},
            ),
        ]
        for name, event, fields in hooks:
            do_create_hook(tenant, name=name, event=event, acting_user=live_agent.owner, **fields)
        session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
        fake_llm.script(
            FakeTurn(
                tool_calls=[
                    ("calculate", {"expression": "2+2"}, "call_1"),
                    ("get_current_time", {}, "call_2"),
                ]
            ),
            FakeTurn(text="the calculator was blocked"),
        )
        reply = chat(session, "hello")
        assert reply.status == "completed"
        assert reply.text.startswith("THE CALCULATOR WAS BLOCKED")  # on_message_sending patched it
        assert "CALCULATE (HOOK_BLOCKED)" in reply.text  # the failed-tools footer (E6), shouted too
        first, second = [r for r in fake_llm.requests if r.json.get("messages")]
        assert "hello [screened]" in user_texts(first)  # on_message_received
        assert "ALWAYS ANSWER IN FRENCH" in json.dumps(first.json["messages"][0])  # before_llm_call
        tool_result = json.dumps(second.json["messages"])
        assert "The calculate tool is blocked by the no-calc hook." in tool_result  # before_tool_call
        tool_messages = {
            m["tool_call_id"]: m["content"] for m in second.json["messages"] if m["role"] == "tool"
        }
        assert tool_messages["call_2"] == "[time withheld]"  # after_tool_call
        assert [r.path for r in receiver.received] == ["/finished"]  # run_finished
        finished = json.loads(receiver.received[0].body)
        assert finished["event"] == "run_finished"
        assert finished["status"] == "completed"
    outcomes = set(
        AuditEvent.objects.unscoped()
        .filter(tenant=tenant, action__startswith="hook_outcome.")
        .values_list("object_repr", "action")
    )
    assert outcomes >= {
        ("mark", "hook_outcome.modify"),
        ("french", "hook_outcome.modify"),
        ("no-calc", "hook_outcome.block"),
        ("hide-time", "hook_outcome.modify"),
        ("shout", "hook_outcome.modify"),
        ("report", "hook_outcome.allow"),
    }

    # Tenant B's run is untouched by tenant A's hooks.
    from agents.models import LLMProvider

    LLMProvider.objects.unscoped().filter(pk=tenant_b.provider.pk).update(base_url=fake_llm.openai_base_url)
    LLMProvider.objects.unscoped().get(pk=tenant_b.provider.pk).save()
    other = do_create_session(tenant_b.agent, user=tenant_b.member, title="set")
    fake_llm.script(FakeTurn(text="plain answer"))
    assert chat(other, "hello").text == "plain answer"
    last = [r for r in fake_llm.requests if r.json.get("messages")][-1]
    assert "[screened]" not in user_texts(last)
    assert "FRENCH" not in json.dumps(last.json["messages"])
    assert (
        not AuditEvent.objects.unscoped()
        .filter(tenant=tenant_b.tenant, action__startswith="hook_outcome.")
        .exists()
    )


def test_a_blocking_hook_that_times_out_drops_the_message(live_agent, fake_llm, settings):
    settings.CLAW_HOOKS_SHELL = True
    do_create_hook(
        live_agent.tenant,
        name="slow-screen",
        event="on_message_received",
        kind="shell",
        command="sleep 10",
        timeout_ms=100,
        acting_user=live_agent.owner,
    )
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    reply = chat(session, "hello")
    assert not [r for r in fake_llm.requests if r.json.get("messages")], "no LLM call for a blocked message"
    assert reply.turn is not None
    assert any("slow-screen hook failed (timed out after 100 ms)" in n for n in reply.turn.notices)
