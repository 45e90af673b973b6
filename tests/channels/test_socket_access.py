"""Issue 21 on the session socket, through the real ASGI stack, the PostgreSQL
channel layer and the process's real LISTEN connection:

- defect 3: a member's login or key opens only that member's chats (4404 otherwise,
  as for a missing chat); viewers read and act in none;
- defect 5: a socket closes when a change takes its access away -- its key revoked
  (by the action or by SQL from another connection), its tenant disabled, its
  account deactivated, its membership removed -- and when its role changes (4403);
  a change to someone else leaves it open.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from claw_platform.api.actions.keys import do_revoke_api_key
from claw_platform.api.listener import process_listener
from claw_platform.api.models import ApiKey
from claw_platform.db import listen_connection_params
from claw_platform.tenancy.models import Membership, Role
from claw_platform.tenancy.rls import system_connection_params
from tests.api.conftest import make_key, make_person_key
from tests.channels.conftest import open_socket

pytestmark = pytest.mark.django_db(transaction=True)

CLOSE_UNAUTHENTICATED, CLOSE_ACCESS_CHANGED, CLOSE_NOT_FOUND = 4401, 4403, 4404


async def open_key_socket(session_id: Any, key: str) -> tuple[WebsocketCommunicator, dict[str, Any]]:
    """An API client's socket (no Origin, no cookie): the key in the first frame.
    Returns it with the server's answer (``authenticated`` or a close)."""
    from claw_platform.asgi import application

    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session_id}/", headers=[(b"host", b"127.0.0.1")]
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    await communicator.send_json_to({"type": "auth", "key": key})
    answer = await communicator.receive_output(timeout=10)
    return communicator, answer


async def close_code(communicator: WebsocketCommunicator, wait: float = 10) -> int:
    """The code the server closes the socket with (frames before it are skipped)."""
    async with asyncio.timeout(wait):
        while True:
            output = await communicator.receive_output(timeout=wait)
            if output["type"] == "websocket.close":
                return int(output["code"])


def from_elsewhere(sql: str, params: list[Any]) -> None:
    """A change committed by another connection (another process, psql): no signal
    of this process hears it, only the database's NOTIFY. An operator's session across
    tenants: it carries the row-level security bypass."""
    with psycopg.connect(**system_connection_params(listen_connection_params()), autocommit=True) as other:
        other.execute(sql, params)


@pytest.fixture
def listening() -> None:
    assert process_listener().ready.wait(10)


def heard() -> int:
    """How many credential changes this process has heard (see ``stays_open``)."""
    from claw_platform.api.credential_watch import credential_watch

    return credential_watch.generation()


async def stays_open(communicator: WebsocketCommunicator, before: int) -> bool:
    """After a change this process has heard (the count of changes heard moved past
    ``before``), the socket got no close and still answers a frame."""
    from claw_platform.api.credential_watch import credential_watch

    async with asyncio.timeout(10):
        while credential_watch.generation() <= before:  # noqa: ASYNC110  (moved by the listener's thread)
            await asyncio.sleep(0.01)
    if not await communicator.receive_nothing(timeout=0.5):
        return False
    await communicator.send_json_to({"type": "nonsense"})
    return (await communicator.receive_json_from(timeout=10))["type"] == "error"


# ----------------------------------------------------------------- defect 3


async def test_a_member_opens_only_their_own_chat_by_login_or_key(member_chats: Any) -> None:
    ts = member_chats.tenant_set
    chat = member_chats.session.pk
    _socket, connected, code = await open_socket(chat, member_chats.m2)
    assert (connected, code) == (False, CLOSE_NOT_FOUND)
    m2_key = await sync_to_async(make_person_key)(ts, member_chats.m2, "write")
    _socket, answer = await open_key_socket(chat, m2_key)
    assert answer == {"type": "websocket.close", "code": CLOSE_NOT_FOUND}

    m1_key = await sync_to_async(make_person_key)(ts, member_chats.m1, "write")
    socket, answer = await open_key_socket(chat, m1_key)
    assert answer["type"] == "websocket.send"
    assert '"can_act": true' in answer["text"]
    await socket.disconnect()
    own, connected, _ = await open_socket(member_chats.own_session.pk, member_chats.m2)
    assert connected
    await own.disconnect()


async def test_owners_and_viewers_open_any_chat_and_viewers_act_in_none(member_chats: Any) -> None:
    ts = member_chats.tenant_set
    chat = member_chats.session.pk
    for user in (ts.owner, ts.admin, ts.viewer):
        socket, connected, _ = await open_socket(chat, user)
        assert connected, user.username
        await socket.disconnect()
    viewer_key = await sync_to_async(make_person_key)(ts, ts.viewer, "admin")
    socket, answer = await open_key_socket(chat, viewer_key)
    assert '"can_act": false' in answer["text"]
    await socket.send_json_to({"type": "approve", "approval_id": member_chats.approval.pk})
    assert "Viewers" in (await socket.receive_json_from(timeout=10))["payload"]["message"]
    await socket.disconnect()


# ----------------------------------------------------------------- defect 5


async def test_revoking_a_key_closes_the_sockets_it_opened(
    tenant_a: Any, member_chats: Any, listening
) -> None:
    chat = member_chats.session.pk
    key = await sync_to_async(make_key)(tenant_a, "write")
    socket, answer = await open_key_socket(chat, key)
    assert '"authenticated"' in answer["text"]
    api_key = await sync_to_async(ApiKey.objects.unscoped().get)(tenant=tenant_a.tenant, name="test key")
    await sync_to_async(do_revoke_api_key)(api_key, acting_user=tenant_a.owner)
    assert await close_code(socket) == CLOSE_UNAUTHENTICATED


async def test_a_key_revoked_by_sql_elsewhere_closes_its_socket(
    tenant_a: Any, member_chats: Any, listening
) -> None:
    key = await sync_to_async(make_key)(tenant_a, "write")
    socket, _ = await open_key_socket(member_chats.session.pk, key)
    other, _ = await open_key_socket(member_chats.session.pk, await sync_to_async(make_key)(tenant_a, "read"))
    before = heard()
    prefix = key.split("_")[1]
    await sync_to_async(from_elsewhere)(
        "UPDATE api_apikey SET revoked_at = now() WHERE prefix = %s", [prefix]
    )
    assert await close_code(socket) == CLOSE_UNAUTHENTICATED
    assert await stays_open(other, before)  # another key's socket is untouched
    await other.disconnect()


async def test_disabling_the_tenant_closes_key_and_login_sockets(
    tenant_a: Any, member_chats: Any, listening
) -> None:
    chat = member_chats.session.pk
    by_key, _ = await open_key_socket(chat, await sync_to_async(make_key)(tenant_a, "write"))
    by_login, connected, _ = await open_socket(chat, member_chats.m1)
    assert connected
    await sync_to_async(from_elsewhere)(
        "UPDATE tenancy_tenant SET is_active = false WHERE id = %s", [tenant_a.tenant.pk]
    )
    assert await close_code(by_key) == CLOSE_UNAUTHENTICATED
    assert await close_code(by_login) == CLOSE_NOT_FOUND


async def test_deactivating_a_user_closes_their_login_and_key_sockets(member_chats: Any, listening) -> None:
    chat = member_chats.session.pk
    m1_key = await sync_to_async(make_person_key)(member_chats.tenant_set, member_chats.m1, "write")
    by_key, _ = await open_key_socket(chat, m1_key)
    by_login, connected, _ = await open_socket(chat, member_chats.m1)
    assert connected
    await sync_to_async(from_elsewhere)(
        "UPDATE auth_user SET is_active = false WHERE id = %s", [member_chats.m1.pk]
    )
    assert await close_code(by_login) == CLOSE_UNAUTHENTICATED
    assert await close_code(by_key) == CLOSE_UNAUTHENTICATED


async def test_removing_a_member_closes_their_sockets(member_chats: Any, listening) -> None:
    own = member_chats.own_session.pk
    m2_key = await sync_to_async(make_person_key)(member_chats.tenant_set, member_chats.m2, "write")
    by_key, _ = await open_key_socket(own, m2_key)
    by_login, connected, _ = await open_socket(own, member_chats.m2)
    assert connected
    membership = await sync_to_async(Membership.objects.unscoped().get)(user=member_chats.m2)
    await sync_to_async(membership.delete)()  # as the admin's Members page does
    assert await close_code(by_login) == CLOSE_NOT_FOUND
    assert await close_code(by_key) == CLOSE_UNAUTHENTICATED


async def test_lowering_a_role_closes_the_sockets_opened_with_the_old_one(
    member_chats: Any, listening
) -> None:
    ts = member_chats.tenant_set
    chat = member_chats.session.pk  # M1's: the owner oversees it
    owner_socket, connected, _ = await open_socket(chat, ts.owner)
    assert connected
    admin_key = await sync_to_async(make_person_key)(ts, ts.admin, "write")
    admin_by_key, answer = await open_key_socket(chat, admin_key)
    assert '"can_act": true' in answer["text"]
    m1_socket, connected, _ = await open_socket(chat, member_chats.m1)
    assert connected
    before = heard()
    await sync_to_async(from_elsewhere)(
        "UPDATE tenancy_membership SET role = %s WHERE user_id = %s", [Role.MEMBER, ts.owner.pk]
    )
    assert await close_code(owner_socket) == CLOSE_NOT_FOUND  # a member sees only their own
    await sync_to_async(from_elsewhere)(
        "UPDATE tenancy_membership SET role = %s WHERE user_id = %s", [Role.VIEWER, ts.admin.pk]
    )
    assert await close_code(admin_by_key) == CLOSE_ACCESS_CHANGED  # still sees it, may no longer act
    assert await stays_open(m1_socket, before)  # other people's roles changed, not M1's
    await m1_socket.disconnect()


async def test_a_key_that_expires_closes_its_socket(tenant_a: Any, member_chats: Any) -> None:
    # Nothing announces an expiry: the socket checks again when the key's time is up.
    from datetime import timedelta

    from django.utils import timezone

    from claw_platform.api.actions.keys import do_create_api_key

    _key, plaintext = await sync_to_async(do_create_api_key)(
        tenant_a.tenant,
        name="short-lived",
        scopes=["read"],
        expires_at=timezone.now() + timedelta(seconds=2),
        acting_user=tenant_a.owner,
    )
    socket, answer = await open_key_socket(member_chats.session.pk, plaintext)
    assert '"authenticated"' in answer["text"]
    assert await close_code(socket) == CLOSE_UNAUTHENTICATED
