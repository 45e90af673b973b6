"""Text PostgreSQL cannot store (issue 21, defect 8): a NUL or a lone surrogate in a
model's tool-call arguments, in a tool's output or in the model's reply no longer
fails the run; each is stored as U+FFFD, wherever it is written. A database error
that still fails a run reaches clients as a readable reason, and the run keeps its
history."""

from __future__ import annotations

import pytest
from django.db import DataError

from agents.models import ApprovalRequest, Message, RunEvent, RunStatus, ToolCallMark, Turn
from agents.runtime.events import events_after
from agents.runtime.worker import execute_run
from claw_platform.storable import storable, storable_text
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.runs.helpers import fresh, new_session

pytestmark = pytest.mark.django_db(transaction=True)

R = "\ufffd"


def send(session, text, user):
    from agents.actions.runs import do_send_message

    return do_send_message(session, text, acting_user=user)


def test_storable_replaces_nul_and_lone_surrogates_and_keeps_clean_values_as_they_are():
    assert storable_text("a\x00b\udc80c\ud83d") == f"a{R}b{R}c{R}"
    assert storable_text("plain é 😀") == "plain é 😀"
    clean = {"a": ["b", 1, {"c": None}]}
    assert storable(clean) is clean
    assert storable({"k\x00": ("v\udfff", 2)}) == {f"k{R}": (f"v{R}", 2)}


def test_nul_in_tool_arguments_and_output_and_in_the_reply_is_stored_and_the_run_completes(
    live_agent, fake_llm, settings, caplog
):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.nul_tools"
    fake_llm.script(
        FakeTurn(text="Echoing.", tool_calls=[("echo", {"text": "a\x00b"}, "call_nul")]),
        FakeTurn(text="The tool said out\x00put."),
    )
    run = send(new_session(live_agent), "echo a NUL", live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed", fresh(run).error
    run = fresh(run)
    assert (run.status, run.error) == (RunStatus.COMPLETED, "")
    parts = [p for m in Message.objects.unscoped().filter(turn_id=run.turn_id) for p in m.parts]
    call = next(p for p in parts if p["type"] == "tool_call")
    result = next(p for p in parts if p["type"] == "tool_result")
    assert call["arguments"] == {"text": f"a{R}b"}
    assert result["content"] == f"out{R}put {R} of a{R}b"
    mark = ToolCallMark.objects.unscoped().filter(turn_id=run.turn_id, call_id="call_nul").first()
    assert mark is None or mark.result["content"] == f"out{R}put {R} of a{R}b"
    assert Turn.objects.unscoped().get(pk=run.turn_id).response_text == f"The tool said out{R}put."
    events = {e.type: e.payload for e in events_after(run)}
    assert "run.failed" not in events
    assert events["run.completed"]["text"] == f"The tool said out{R}put."
    assert f"a{R}b" in str(events["tool.call"])
    # The model got the tool's real output (only storage replaces characters).
    sent = [m for m in fake_llm.requests[-1].json["messages"] if m.get("role") == "tool"]
    assert "out\x00put" in str(sent[-1]["content"])
    # Every event went out live too (the lone surrogate replaced), none was dropped.
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text[-2000:]


def test_nul_in_an_approval_requests_arguments_is_stored(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.approval_tools"
    fake_llm.script(FakeTurn(tool_calls=[("delete_file", {"path": "x\x00y.txt"}, "call_del")]))
    run = send(new_session(live_agent), "delete it", live_agent.member)
    assert execute_run(run.pk, wait=True) == "awaiting_approval", fresh(run).error
    approval = ApprovalRequest.objects.unscoped().get(run=run)
    assert approval.arguments == {"path": f"x{R}y.txt"}
    assert "approval_needed" in [e.type for e in events_after(run)]


def test_a_database_error_fails_the_run_with_a_readable_reason_and_keeps_its_history(
    live_agent, fake_llm, monkeypatch, settings
):
    from agents.runtime import store as store_module

    settings.CLAW_RUN_TOOLS_FACTORY = "tests.runs.tools.nul_tools"
    real = store_module.DjangoRunStore._persist_step
    steps = {"n": 0}
    raw = 'value too long for type character varying(32) CONTEXT: SQL statement "INSERT INTO agents_message"'

    def refused_last_step(self, step):
        steps["n"] += 1
        if steps["n"] == 3:  # the message, the tool step, then the reply: refused
            raise DataError(raw)
        return real(self, step)

    monkeypatch.setattr(store_module.DjangoRunStore, "_persist_step", refused_last_step)
    fake_llm.script(
        FakeTurn(text="Echoing.", tool_calls=[("echo", {"text": "hi"}, "call_1")]),
        FakeTurn(text="Never stored."),
    )
    run = send(new_session(live_agent), "echo", live_agent.member)
    assert execute_run(run.pk, wait=True) == "failed"
    run = fresh(run)
    assert run.status == RunStatus.FAILED
    for shown in (
        run.error,
        Turn.objects.unscoped().get(pk=run.turn_id).error,
        str(RunEvent.objects.unscoped().get(run=run, type="run.failed").payload),
    ):
        assert "could not be saved" in shown, shown
        for internal in ("CONTEXT", "agents_message", "varying"):
            assert internal not in shown, shown
    # The first step (the tool call and its result) is kept.
    kept = [p["type"] for m in Message.objects.unscoped().filter(turn_id=run.turn_id) for p in m.parts]
    assert {"tool_call", "tool_result"} <= set(kept), kept


def test_titles_memory_and_audit_rows_store_nul_and_lone_surrogates(live_agent):
    """The other places model and tool text lands, each through its own writer."""
    from agents.actions.conversation import do_set_title
    from agents.memory.store import MemoryOwner, PostgresMemoryStore
    from agents.models import MemoryEntry, Session
    from claw_platform.audit.actions import record_audit_event
    from claw_platform.audit.models import AuditEvent
    from claw_platform.tenancy.context import tenant_context

    session = new_session(live_agent)
    do_set_title(session, "Title \x00 with \ud800 junk")
    assert Session.objects.unscoped().get(pk=session.pk).title == f"Title {R} with {R} junk"
    owner = MemoryOwner(live_agent.tenant.pk, live_agent.agent.pk, live_agent.member.pk)
    hit = PostgresMemoryStore().write(owner, "likes \x00 tea \udfff", scope="user", category="core")
    assert MemoryEntry.objects.unscoped().get(pk=hit.id).content == f"likes {R} tea {R}"
    # Found first (the tenant's fixtures hold a memory of their own, which may follow).
    assert PostgresMemoryStore().search(owner, "tea")[0].id == hit.id
    with tenant_context(live_agent.tenant.pk):
        record_audit_event(
            action="tool.executed",
            actor=live_agent.member,
            tenant_id=live_agent.tenant.pk,
            diff={"arguments": {"path\x00": "x\x00\udc80"}},
        )
    event = AuditEvent.objects.unscoped().filter(action="tool.executed").latest("pk")
    assert event.diff == {"arguments": {f"path{R}": f"x{R}{R}"}}
