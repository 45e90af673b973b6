"""U1, U2, E5: the session socket through the real ASGI stack and the PostgreSQL
channel layer on the test database."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import ApprovalRequest, ApprovalStatus, Run, RunStatus, Session, Turn
from agents.runtime.events import store_run_event
from channels_app.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from channels_app.relay import ChannelLayerRelay
from tests.channels.conftest import open_socket

pytestmark = pytest.mark.django_db(transaction=True)


def member_session(tenant_set: Any) -> Session:
    return do_create_session(tenant_set.agent, user=tenant_set.member, title="socket test")


async def receive_until(communicator: Any, kind: str, wait: float = 10) -> dict[str, Any]:
    """The next frame of ``kind``, skipping others."""
    async with asyncio.timeout(wait):
        while True:
            frame = await communicator.receive_json_from(timeout=wait)
            if frame["type"] == kind:
                return frame


async def test_a_member_connects_to_their_tenants_session(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    for user in (tenant_a.member, tenant_a.viewer, tenant_a.owner):
        communicator, connected, _ = await open_socket(session.pk, user)
        assert connected
        await communicator.disconnect()


async def test_it_refuses_another_tenants_session_exactly_like_a_missing_one(
    tenant_a: Any, tenant_b: Any, outsider: Any
) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    for user in (tenant_b.member, tenant_b.owner, outsider):
        _communicator, connected, code = await open_socket(session.pk, user)
        assert (connected, code) == (False, CLOSE_NOT_FOUND)
    _communicator, connected, code = await open_socket(
        "6f1c2d1e-0000-4000-8000-000000000000", tenant_b.member
    )
    assert (connected, code) == (False, CLOSE_NOT_FOUND)


async def test_it_refuses_anonymous_users_and_foreign_origins(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    _communicator, connected, code = await open_socket(session.pk)
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)
    _communicator, connected, _ = await open_socket(
        session.pk, tenant_a.member, origin=b"https://evil.example"
    )
    assert not connected


async def test_a_message_queues_a_run_and_a_viewer_is_refused(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    communicator, _, _ = await open_socket(session.pk, tenant_a.member)
    await communicator.send_json_to({"type": "message", "text": "hello there"})
    run = None
    for _ in range(100):
        run = await sync_to_async(Run.objects.unscoped().filter(session_id=session.pk).first)()
        if run is not None:
            break
        await asyncio.sleep(0.05)
    assert run is not None
    assert run.status == RunStatus.QUEUED
    assert run.requested_by_id == tenant_a.member.pk
    await communicator.disconnect()

    viewer, _, _ = await open_socket(session.pk, tenant_a.viewer)
    await viewer.send_json_to({"type": "message", "text": "may I?"})
    error = await receive_until(viewer, "error")
    assert "Viewers" in error["payload"]["message"]
    await viewer.send_json_to({"type": "stop"})
    assert "Viewers" in (await receive_until(viewer, "error"))["payload"]["message"]
    await viewer.disconnect()
    assert await sync_to_async(Run.objects.unscoped().filter(session_id=session.pk).count)() == 1


async def test_bad_frames_get_readable_errors(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    communicator, _, _ = await open_socket(session.pk, tenant_a.member)
    await communicator.send_to(text_data="not json")
    assert "Not valid JSON" in (await receive_until(communicator, "error"))["payload"]["message"]
    await communicator.send_json_to({"type": "message", "text": "  "})
    assert "needs some text" in (await receive_until(communicator, "error"))["payload"]["message"]
    await communicator.send_json_to({"type": "stop"})
    assert "Nothing is running" in (await receive_until(communicator, "error"))["payload"]["message"]
    await communicator.disconnect()


async def test_slash_commands_are_answered_without_a_run(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    communicator, _, _ = await open_socket(session.pk, tenant_a.member)
    await communicator.send_json_to({"type": "message", "text": "/help"})
    frame = await receive_until(communicator, "command")
    assert frame["payload"]["command"] == "help"
    assert "/undo" in frame["payload"]["text"]
    await communicator.disconnect()
    assert not await sync_to_async(Run.objects.unscoped().filter(session_id=session.pk).exists)()


async def test_relayed_events_reach_the_sessions_sockets_only(tenant_a: Any, tenant_b: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    other = await sync_to_async(member_session)(tenant_b)
    run = await sync_to_async(do_send_message)(session, "hi", acting_user=tenant_a.member)
    mine, _, _ = await open_socket(session.pk, tenant_a.member)
    second_tab, _, _ = await open_socket(session.pk, tenant_a.owner)
    theirs, _, _ = await open_socket(other.pk, tenant_b.member)
    relay = ChannelLayerRelay()
    await relay.relay(run.pk, 0, "chunk", {"text": "Hel", "run_id": run.pk})
    await relay.relay(run.pk, 1, "tool.call", {"id": "c1", "name": "bash", "arguments": {"cmd": "ls"}})
    for communicator in (mine, second_tab):
        first = await communicator.receive_json_from(timeout=10)
        assert first == {
            "type": "chunk",
            "run": run.pk,
            "seq": 0,
            "payload": {"text": "Hel", "run_id": run.pk},
        }
        second = await communicator.receive_json_from(timeout=10)
        assert (second["type"], second["seq"], second["payload"]["name"]) == ("tool.call", 1, "bash")
    assert await theirs.receive_nothing(timeout=0.5)
    for communicator in (mine, second_tab, theirs):
        await communicator.disconnect()


@transaction.atomic
def _running_run_with_history(session: Session, user: Any) -> Run:
    run = do_send_message(session, "write a poem", acting_user=user)
    assert run is not None
    store_run_event(run, "run.started", {"model": "m"})
    store_run_event(run, "tool.call", {"id": "c1", "name": "bash", "arguments": {}})
    store_run_event(run, "tool.result", {"id": "c1", "name": "bash", "is_error": False, "preview": "ok"})
    Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.RUNNING)
    Turn.objects.unscoped().filter(pk=run.turn_id).update(partial_text="Roses are red,")
    return Run.objects.unscoped().get(pk=run.pk)


async def test_resume_replays_stored_events_and_the_partial_reply_without_the_llm(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    run = await sync_to_async(_running_run_with_history)(session, tenant_a.member)
    communicator, _, _ = await open_socket(session.pk, tenant_a.owner)

    await communicator.send_json_to({"type": "resume"})
    frames = [await communicator.receive_json_from(timeout=10) for _ in range(5)]
    assert [(f["type"], f["seq"]) for f in frames] == [
        ("run.queued", 1),
        ("run.started", 2),
        ("tool.call", 3),
        ("tool.result", 4),
        ("snapshot", 4),
    ]
    snapshot = frames[-1]["payload"]
    assert (snapshot["text"], snapshot["status"]) == ("Roses are red,", "running")
    assert snapshot["turn"]["text"] == "write a poem"
    assert snapshot["turn"]["partial"] == "Roses are red,"
    assert snapshot["turn"]["run"] == {"id": run.pk, "status": "running", "error": "", "seq": 4}

    await communicator.send_json_to({"type": "resume", "run": run.pk, "after": 3})
    frames = [await communicator.receive_json_from(timeout=10) for _ in range(2)]
    assert [(f["type"], f["seq"]) for f in frames] == [("tool.result", 4), ("snapshot", 4)]
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_stop_cancels_a_queued_run_and_every_tab_hears_it(tenant_a: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    run = await sync_to_async(do_send_message)(session, "hi", acting_user=tenant_a.member)
    communicator, _, _ = await open_socket(session.pk, tenant_a.member)
    other_tab, _, _ = await open_socket(session.pk, tenant_a.member)
    await communicator.send_json_to({"type": "stop"})
    for tab in (communicator, other_tab):
        frame = await receive_until(tab, "run.cancelled")
        assert frame["run"] == run.pk
    await run.arefresh_from_db()
    assert run.status == RunStatus.CANCELLED
    await communicator.disconnect()
    await other_tab.disconnect()


def _awaiting_approval(session: Session, user: Any) -> tuple[Run, ApprovalRequest]:
    run = do_send_message(session, "delete it", acting_user=user)
    assert run is not None
    Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
    approval = ApprovalRequest.objects.unscoped().create(
        tenant_id=session.tenant_id, run=run, call_id="call_1", tool_name="bash", arguments={"cmd": "rm x"}
    )
    return run, approval


async def test_approve_and_deny_decide_only_this_sessions_requests(tenant_a: Any, tenant_b: Any) -> None:
    session = await sync_to_async(member_session)(tenant_a)
    run, approval = await sync_to_async(_awaiting_approval)(session, tenant_a.member)
    other_session = await sync_to_async(member_session)(tenant_b)
    _, foreign = await sync_to_async(_awaiting_approval)(other_session, tenant_b.member)

    communicator, _, _ = await open_socket(session.pk, tenant_a.member)
    await communicator.send_json_to({"type": "approve", "approval_id": foreign.pk})
    assert "No such approval" in (await receive_until(communicator, "error"))["payload"]["message"]
    viewer, _, _ = await open_socket(session.pk, tenant_a.viewer)
    await viewer.send_json_to({"type": "approve", "approval_id": approval.pk})
    assert "Viewers" in (await receive_until(viewer, "error"))["payload"]["message"]

    await communicator.send_json_to({"type": "approve", "run": run.pk, "call_id": "call_1", "reason": "fine"})
    await communicator.send_json_to({"type": "deny", "approval_id": approval.pk})
    error = await receive_until(communicator, "error")
    assert "already approved" in error["payload"]["message"]
    await approval.arefresh_from_db()
    await foreign.arefresh_from_db()
    assert (approval.status, approval.reason, approval.decided_by_id) == (
        ApprovalStatus.APPROVED,
        "fine",
        tenant_a.member.pk,
    )
    assert foreign.status == ApprovalStatus.PENDING
    await run.arefresh_from_db()
    assert run.status == RunStatus.QUEUED
    await communicator.disconnect()
    await viewer.disconnect()


async def test_a_closed_socket_leaves_no_channel_state_in_the_layer(tenant_a: Any) -> None:
    from channels.layers import get_channel_layer
    from channels_postgres import core

    session = await sync_to_async(member_session)(tenant_a)
    layer = get_channel_layer()
    before = set(core.ASYNCIO_EVENT_CHANNEL_MAPPING)
    communicator, connected, _ = await open_socket(session.pk, tenant_a.member)
    assert connected
    await communicator.send_json_to({"type": "resume"})  # a round trip: the socket is live
    await asyncio.sleep(0.2)
    opened = set(core.ASYNCIO_EVENT_CHANNEL_MAPPING) - before
    assert len(opened) == 1
    await communicator.disconnect()
    await asyncio.sleep(0.1)
    assert not opened & set(core.ASYNCIO_EVENT_CHANNEL_MAPPING)
    assert not opened & set(layer._channel_advisory_locks)


async def test_a_gap_in_the_layer_tells_the_client_to_resync(tenant_a: Any) -> None:
    """The layer lost messages to this socket (``claw_platform.redis_layer``'s
    ``layer.gap``): the client is told to resume from the stored events."""
    from channels.layers import get_channel_layer

    from channels_app.relay import session_group

    session = await sync_to_async(member_session)(tenant_a)
    communicator, connected, _ = await open_socket(session.pk, tenant_a.member)
    assert connected
    await get_channel_layer().group_send(session_group(session.pk), {"type": "layer.gap"})
    assert await receive_until(communicator, "resync") == {"type": "resync"}
    await communicator.disconnect()
