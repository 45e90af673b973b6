"""A6: an API client opens the session socket without a login session and sends its
key in the first frame; another tenant's key gets nothing."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from agents.actions.conversation import do_create_session
from agents.models import Run
from tests.api.conftest import make_key

pytestmark = pytest.mark.django_db(transaction=True)


async def open_api_socket(session_id: Any) -> WebsocketCommunicator:
    from claw_platform.asgi import application

    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session_id}/", headers=[(b"host", b"127.0.0.1")]
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    return communicator


async def test_a_key_in_the_first_frame_opens_the_session_and_can_send(tenant_a: Any) -> None:
    session = await sync_to_async(do_create_session)(tenant_a.agent, title="socket")
    key = await sync_to_async(make_key)(tenant_a, "write")
    communicator = await open_api_socket(session.pk)
    await communicator.send_json_to({"type": "auth", "key": key})
    assert await communicator.receive_json_from(timeout=10) == {
        "type": "authenticated",
        "payload": {"can_act": True},
    }
    await communicator.send_json_to({"type": "message", "text": "hello by key"})
    for _ in range(100):
        run = await sync_to_async(lambda: Run.objects.unscoped().filter(session_id=session.pk).first())()
        if run is not None:
            break
        await communicator.receive_nothing(timeout=0.05)
    assert run is not None
    assert run.requested_by_id is None
    await communicator.disconnect()


async def test_a_read_key_reads_but_cannot_send(tenant_a: Any) -> None:
    session = await sync_to_async(do_create_session)(tenant_a.agent, title="socket")
    key = await sync_to_async(make_key)(tenant_a, "read")
    communicator = await open_api_socket(session.pk)
    await communicator.send_json_to({"type": "auth", "key": key})
    assert (await communicator.receive_json_from(timeout=10))["payload"] == {"can_act": False}
    await communicator.send_json_to({"type": "message", "text": "hello"})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "error"
    await communicator.disconnect()


async def test_bad_and_foreign_keys_are_closed(tenant_a: Any, tenant_b: Any) -> None:
    session = await sync_to_async(do_create_session)(tenant_a.agent, title="socket")
    foreign = await sync_to_async(make_key)(tenant_b, "admin")
    for frame, code in (
        ({"type": "auth", "key": foreign}, 4404),
        ({"type": "auth", "key": "claw_000000000000_wrong"}, 4401),
        ({"type": "message", "text": "no key"}, 4401),
    ):
        communicator = await open_api_socket(session.pk)
        await communicator.send_json_to(frame)
        output = await communicator.receive_output(timeout=10)
        assert output == {"type": "websocket.close", "code": code}


async def test_a_keys_socket_run_is_the_keys_and_its_spent_budget_refuses_up_front(tenant_a: Any) -> None:
    """O1 / the budgets issue: a message sent over a key-signed socket is recorded on
    the key (usage by key) and refused at once, with nothing queued, when the key's own
    budget is spent (as the API's 402)."""
    from decimal import Decimal

    from agents.budgets.models import Budget, BudgetScope
    from claw_platform.api.models import ApiKey

    session = await sync_to_async(do_create_session)(tenant_a.agent, title="socket")
    key = await sync_to_async(make_key)(tenant_a, "write")
    communicator = await open_api_socket(session.pk)
    await communicator.send_json_to({"type": "auth", "key": key})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "authenticated"
    await communicator.send_json_to({"type": "message", "text": "first, within budget"})
    for _ in range(100):
        run = await sync_to_async(lambda: Run.objects.unscoped().filter(session_id=session.pk).first())()
        if run is not None:
            break
        await communicator.receive_nothing(timeout=0.05)
    assert run is not None
    key_row = await sync_to_async(lambda: ApiKey.objects.unscoped().get(tenant=tenant_a.tenant))()
    assert run.api_key_id == key_row.pk

    await sync_to_async(Budget.objects.unscoped().create)(
        tenant=tenant_a.tenant,
        name="Key cap",
        scope=BudgetScope.API_KEY,
        api_key=key_row,
        limit=Decimal("0.01"),
        spent=Decimal("0.01"),
        period="none",
    )
    await communicator.send_json_to({"type": "message", "text": "second, over the key's budget"})
    frame = await communicator.receive_json_from(timeout=10)
    while frame["type"] != "error":
        frame = await communicator.receive_json_from(timeout=10)
    assert "'Key cap'" in frame["payload"]["message"]
    await communicator.disconnect()
    assert await sync_to_async(Run.objects.unscoped().filter(session_id=session.pk).count)() == 1
