"""Issue 21, defect 5 for event streams: a stream served over real HTTP ends when the
rights it was opened with are taken away (a key revoked, a member removed), as the
sockets close; the caller reconnects and is refused. The client's read timeout
(shorter than the server's keep-alive tick) fails the test if the stream goes on."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from claw_platform.api.actions.keys import do_revoke_api_key
from claw_platform.api.models import ApiKey
from claw_platform.tenancy.models import Membership
from tests.api.conftest import make_key, make_person_key
from tests.api.server import live_asgi_server

pytestmark = pytest.mark.django_db(transaction=True)


def opened_stream(stream: httpx.Response) -> Iterator[str]:
    """The stream's lines, after checking it opened."""
    assert stream.status_code == 200
    lines = stream.iter_lines()
    assert next(lines) == ": connected"
    return lines


def test_revoking_a_key_ends_its_event_stream(tenant_a):
    key = make_key(tenant_a, "read")
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    with live_asgi_server() as url:
        with httpx.stream("GET", f"{url}/api/v1/events/?timeout=600", headers=headers, timeout=10) as stream:
            lines = opened_stream(stream)
            api_key = ApiKey.objects.unscoped().get(tenant=tenant_a.tenant)
            do_revoke_api_key(api_key, acting_user=tenant_a.owner)
            assert "event:" not in "".join(lines)  # the server ended it (no read timed out)
        assert httpx.get(f"{url}/api/v1/events/", headers=headers, timeout=10).status_code == 401


def test_removing_a_member_ends_the_streams_of_their_key(member_chats):
    key = make_person_key(member_chats.tenant_set, member_chats.m2, "write")
    headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
    with live_asgi_server() as url:
        path = f"{url}/api/v1/events/?timeout=600"
        with httpx.stream("GET", path, headers=headers, timeout=10) as stream:
            lines = opened_stream(stream)
            Membership.objects.unscoped().get(user=member_chats.m2).delete()
            assert "event:" not in "".join(lines)
        assert httpx.get(f"{url}/api/v1/events/", headers=headers, timeout=10).status_code == 401
