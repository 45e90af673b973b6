"""S1, S2, S3, S7, O1, P5, G2, E22, E24 through the Django store and the chat service,
against the fake LLM over real HTTP."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.actions.config import do_create_model_profile, do_save_agent_file
from agents.actions.conversation import do_create_session
from agents.engine.interfaces import READ_ONLY, StepRecord, ToolTraits
from agents.engine.types import Message as EngineMessage
from agents.engine.types import Usage
from agents.models import AgentFile, Message, MessageState, ModelProfile, Session, Thread, Turn, UsageRecord
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from agents.runtime.resolution import resolve_agent
from agents.runtime.store import DjangoRunStore, TurnBinding
from tests.fakes.engine import FakeTool, FakeToolExecutor
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def stored(session) -> list[tuple[str, list]]:
    return list(
        Message.objects.unscoped()
        .filter(session=session, state=MessageState.ACTIVE)
        .order_by("seq")
        .values_list("role", "parts")
    )


def chat(session, text, **kwargs):
    async def run():
        try:
            return await handle_message(session.pk, text, **kwargs)
        finally:
            await close_providers()  # each asyncio.run is a new loop with new pools

    return asyncio.run(run())


def test_s2_a_multi_turn_conversation_is_stored_with_usage_and_cost(live_agent, fake_llm):
    ModelProfile.objects.unscoped().filter(pk=live_agent.model.pk).update(input_price=3, output_price=15)
    live_agent.model.refresh_from_db()
    live_agent.model.save()
    # Titled already: the scripted fake answers in order, and a background title
    # request would race the first turn (titles are covered in tests/engine).
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(
        FakeTurn(text="Hello! How can I help?", usage=Usage(100, 20)),
        FakeTurn(text="Paris is the capital.", usage=Usage(200, 10, cache_read_tokens=50)),
    )
    first = chat(session, "hi there")
    assert first.status == "completed"
    assert first.text == "Hello! How can I help?"
    second = chat(session, "capital of France?")
    assert second.text == "Paris is the capital."
    roles = [r for r, _ in stored(session)]
    assert roles == ["user", "assistant", "user", "assistant"]
    seqs = list(
        Message.objects.unscoped().filter(session=session).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == [1, 2, 3, 4]
    loop_usage = UsageRecord.objects.unscoped().filter(session=session, purpose="agent_loop").order_by("id")
    assert [(u.input_tokens, u.output_tokens) for u in loop_usage] == [(100, 20), (200, 10)]
    # P5: 100*3 + 20*15 per million = 0.0006
    assert loop_usage[0].cost == Decimal("0.000600")
    session.refresh_from_db()
    assert session.input_tokens >= 300
    assert session.cost >= Decimal("0.000600") + loop_usage[1].cost
    # The second request carried the first exchange as history.
    second_request = [r for r in fake_llm.requests if r.json.get("messages")][-1].json
    texts = [m.get("content") for m in second_request["messages"]]
    assert "hi there" in str(texts)
    assert "Hello! How can I help?" in str(texts)


def test_streaming_and_non_streaming_store_identical_messages(live_agent, fake_llm):
    tool = FakeTool("lookup", output="42", traits=READ_ONLY)

    async def tools(agent, session):
        return FakeToolExecutor(tool)

    script = [
        FakeTurn(
            text="Let me check.", thinking="need lookup", tool_calls=[("lookup", {"q": "answer"}, "call_1")]
        ),
        FakeTurn(text="The answer is 42."),
    ]
    results = []
    for stream in (True, False):
        session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
        fake_llm.script(*script)
        reply = chat(session, "what is the answer?", tools_factory=tools, stream=stream)
        assert reply.text == "The answer is 42."
        results.append(stored(session))
    assert results[0] == results[1]
    roles = [r for r, _ in results[0]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assistant_parts = results[0][1][1]
    assert [p["type"] for p in assistant_parts] == ["reasoning", "text", "tool_call"]
    assert results[0][2][1][0]["content"] == "42"


def test_a_provider_outage_fails_readably_and_keeps_history(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(FakeTurn(text="First answer."))
    chat(session, "first")
    fake_llm.script(*[FakeTurn.http_error(500, message="upstream exploded") for _ in range(4)])
    from agents.providers import base

    original = base.BACKOFF_BASE if hasattr(base, "BACKOFF_BASE") else None
    reply = chat(session, "second")
    assert reply.status == "failed"
    assert "upstream exploded" in (reply.turn.error or "") or "500" in (reply.turn.error or "")
    assert "Traceback" not in (reply.turn.error or "")
    assert [r for r, _ in stored(session)][:2] == ["user", "assistant"]
    turn = Turn.objects.unscoped().filter(session=session).order_by("-id").first()
    assert turn.state == "failed"
    assert original is None or original == base.BACKOFF_BASE


def test_s3_undo_hides_the_last_turn_and_redo_brings_it_back(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(FakeTurn(text="one"), FakeTurn(text="two"))
    chat(session, "first")
    chat(session, "second")
    assert chat(session, "/undo").text == "Undid the last turn."
    assert [p[0]["text"] for _, p in stored(session)] == ["first", "one"]
    assert chat(session, "/redo").text == "Redid the turn."
    assert [p[0]["text"] for _, p in stored(session)] == ["first", "one", "second", "two"]
    assert chat(session, "/redo").text == "Nothing to redo."
    # A new turn after an undo ends the redo stack; undone messages stay stored.
    chat(session, "/undo")
    fake_llm.script(FakeTurn(text="three"))
    chat(session, "third")
    assert chat(session, "/redo").text == "Nothing to redo."
    assert Message.objects.unscoped().filter(session=session, state=MessageState.UNDONE).count() == 2


def test_s3_only_twenty_checkpoints_are_kept(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(*[FakeTurn(text=f"r{i}") for i in range(22)])
    for i in range(22):
        chat(session, f"m{i}")
    thread = Thread.objects.unscoped().get(pk=session.active_thread_id)
    assert thread.checkpoints.model.objects.unscoped().filter(thread=thread).count() == 20


def test_s7_concurrent_steps_never_interleave(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    from agents.actions.conversation import do_start_turn

    turns = [do_start_turn(session, f"t{i}") for i in range(2)]
    stores = [
        DjangoRunStore(TurnBinding(session.tenant_id, session.pk, t.thread_id, t.pk, session.agent_id, None))
        for t in turns
    ]

    async def write(store, label):
        for i in range(10):
            await store.persist_step(
                StepRecord(
                    i, [EngineMessage.user(f"{label}-{i}-a"), EngineMessage.assistant(f"{label}-{i}-b")]
                )
            )

    async def main():
        await asyncio.gather(write(stores[0], "x"), write(stores[1], "y"))

    asyncio.run(main())
    rows = list(
        Message.objects.unscoped().filter(session=session).order_by("seq").values_list("seq", "parts")
    )
    assert [s for s, _ in rows] == list(range(1, 41))
    texts = [p[0]["text"] for _, p in rows]
    for i in range(0, 40, 2):  # each step's two messages sit together
        assert texts[i].rsplit("-", 1)[0] == texts[i + 1].rsplit("-", 1)[0]


def test_history_load_is_bounded_however_old_the_session(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    thread = Thread.objects.unscoped().get(pk=session.active_thread_id)
    Message.objects.unscoped().bulk_create(
        [
            Message(
                tenant_id=session.tenant_id,
                session=session,
                thread=thread,
                seq=i + 1,
                role="user" if i % 2 == 0 else "assistant",
                parts=[{"type": "text", "text": f"m{i}"}],
            )
            for i in range(3000)
        ]
    )
    Thread.objects.unscoped().filter(pk=thread.pk).update(last_seq=3000)
    from agents.actions.conversation import do_start_turn

    turn = do_start_turn(session, "x")
    store = DjangoRunStore(
        TurnBinding(session.tenant_id, session.pk, thread.pk, turn.pk, session.agent_id, None)
    )
    with CaptureQueriesContext(connection):
        state = asyncio.run(store.load_conversation(max_messages=50))
    assert len(state.messages) == 50
    assert state.messages[-1].text == "m2999"


def test_g2_an_admin_change_applies_to_the_next_resolution(live_agent, django_assert_max_num_queries):
    agent_id = live_agent.agent.pk
    resolved = resolve_agent(agent_id)
    with django_assert_max_num_queries(1):
        assert resolve_agent(agent_id) is resolved  # a hit costs one version query
    do_save_agent_file(live_agent.agent, "SOUL.md", "You are grumpy.")
    fresh = resolve_agent(agent_id)
    assert fresh is not resolved
    assert fresh.context_files(None)["SOUL.md"] == "You are grumpy."


def test_g3_a_users_own_file_overrides_the_agents(live_agent):
    do_save_agent_file(live_agent.agent, "USER.md", "Likes tea.", user=live_agent.member)
    resolved = resolve_agent(live_agent.agent.pk)
    assert resolved.context_files(live_agent.member.pk)["USER.md"] == "Likes tea."
    assert "USER.md" not in resolved.context_files(live_agent.owner.pk)


def test_e22_model_and_models_switch_the_session_model(live_agent, fake_llm):
    other = do_create_model_profile(
        live_agent.provider, model="bigger-model", context_window=64_000, max_output_tokens=2048
    )
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    listing = chat(session, "/models")
    assert "bigger-model" in listing.text
    assert "a-model" in listing.text
    assert "Switched" in chat(session, "/model bigger-model").text
    fake_llm.script(FakeTurn(text="from the bigger model"))
    chat(session, "hello")
    assert fake_llm.requests[-1].json["model"] == "bigger-model"
    assert "No model" in chat(session, "/model nonexistent").text
    assert Session.objects.unscoped().get(pk=session.pk).model_override_id == other.pk


def test_e24_remember_writes_memory_without_an_llm_call(live_agent, fake_llm):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    reply = chat(session, "remember that my cat is called Miso")
    assert "Miso" in reply.text
    assert fake_llm.requests == []
    memory = AgentFile.objects.unscoped().get(
        agent=live_agent.agent, user=live_agent.member, name="MEMORY.md"
    )
    assert "my cat is called Miso" in memory.content


def test_status_and_unknown_thread(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    status = chat(session, "/status")
    assert "Agent: A assistant" in status.text
    assert "a-model" in status.text
    assert chat(session, "/thread 00000000-0000-0000-0000-000000000000").text.startswith("No thread")


def test_tool_traits_reach_the_store_marks(live_agent, fake_llm):
    tool = FakeTool("send", output="sent", traits=ToolTraits(side_effects=True, parallel_safe=False))

    async def tools(agent, session):
        return FakeToolExecutor(tool)

    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(FakeTurn(tool_calls=[("send", {"to": "x"}, "c1")]), FakeTurn(text="done"))
    reply = chat(session, "send it", tools_factory=tools)
    assert reply.text == "done"
    turn = Turn.objects.unscoped().filter(session=session).order_by("-id").first()
    assert turn.pending_step is None
    assert not turn.tool_marks.model.objects.unscoped().filter(turn=turn).exists()


def test_sync_to_async_store_is_usable_from_async_code(live_agent):
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")

    async def count():
        return await sync_to_async(Message.objects.unscoped().filter(session=session).count)()

    assert asyncio.run(count()) == 0


def test_e20_a_sub_agent_session_is_linked_to_its_parent(live_agent):
    from agents.actions.conversation import do_start_turn
    from agents.runtime.store import DjangoChildSessions

    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    turn = do_start_turn(session, "delegate")
    factory = DjangoChildSessions(
        TurnBinding(
            session.tenant_id, session.pk, turn.thread_id, turn.pk, session.agent_id, live_agent.member.pk
        )
    )
    store = asyncio.run(factory.open_child(parent=None, call_id="c1", title="research"))
    child = Session.objects.unscoped().get(pk=store.binding.session_id)
    assert child.parent_id == session.pk
    assert child.depth == 1
    assert child.tenant_id == session.tenant_id
    assert child.title == "research"


def test_s5_an_external_conversation_key_maps_to_one_session_per_tenant(live_agent, tenant_b):
    from agents.actions.conversation import session_for_external_key

    first = session_for_external_key(live_agent.agent, "telegram:42:main", channel="telegram")
    again = session_for_external_key(live_agent.agent, "telegram:42:main", channel="telegram")
    other = session_for_external_key(tenant_b.agent, "telegram:42:main", channel="telegram")
    assert first.pk == again.pk
    assert other.pk != first.pk
    assert other.tenant_id == tenant_b.tenant.pk
