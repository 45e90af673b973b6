"""Defect 4 (issue 21): sign-in is throttled, per (account, address) first and per
address more loosely, on both sign-in pages; the client address comes from the
trusted-proxy setting; lock-outs are audited and lifted by a superuser in the admin or
by `claw unlock`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from axes.models import AccessAttempt
from django.test import Client
from django.urls import reverse

from claw_platform.audit.models import AuditEvent
from claw_platform.client_address import client_address
from tests.fixtures.tenants import PASSWORD, make_user
from tests.platform.test_cli_chat import database_url_for_tests

CHAT = "chat:login"
ADMIN = "admin:login"
ATTACKER = "203.0.113.7"
OWNER_HOME = "198.51.100.20"


def sign_in(client: Client, page: str, username: str, password: str, address: str, **extra: str):
    return client.post(
        reverse(page), {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


def signed_in(response) -> bool:
    return response.status_code == 302


def locked_out(response) -> bool:
    return response.status_code == 429 and "Too many failed sign-ins" in response.content.decode()


def fail(page: str, username: str, address: str, times: int, **extra: str) -> list:
    return [sign_in(Client(), page, username, "wrong password", address, **extra) for _ in range(times)]


@pytest.mark.parametrize("page", [CHAT, ADMIN])
def test_the_fifth_wrong_password_locks_the_account_out_from_that_address(page, tenant_a):
    answers = fail(page, "a_owner", ATTACKER, 5)
    assert [r.status_code for r in answers] == [200, 200, 200, 200, 429]
    assert "correct username and password" in answers[0].content.decode()
    last = answers[-1]
    assert locked_out(last)
    assert "Try again in 15 minutes" in last.content.decode()
    assert 890 <= int(last["Retry-After"]) <= 900
    # The right password is refused while the lock-out lasts, with the same message.
    right = sign_in(Client(), page, "a_owner", PASSWORD, ATTACKER)
    assert locked_out(right)
    assert "_auth_user_id" not in right.wsgi_request.session


@pytest.mark.parametrize("page", [CHAT, ADMIN])
def test_another_address_can_still_sign_in_to_the_same_account(page, tenant_a):
    fail(page, "a_owner", ATTACKER, 20)
    assert signed_in(sign_in(Client(), page, "a_owner", PASSWORD, OWNER_HOME))


def test_attempts_during_a_lock_out_neither_count_nor_extend_it(tenant_a):
    fail(CHAT, "a_owner", ATTACKER, 5)
    row = AccessAttempt.objects.get(username="a_owner", ip_address=ATTACKER)
    fail(CHAT, "a_owner", ATTACKER, 10)
    row.refresh_from_db()
    assert row.failures_since_start == 5


def test_the_looser_per_address_limit_locks_every_account_from_that_address(tenant_a, settings):
    assert settings.CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS == 30
    # Guessing at 30 names (each below the per-account limit) from one address.
    answers = [sign_in(Client(), CHAT, f"guess{i}", "wrong", ATTACKER) for i in range(30)]
    assert [r.status_code for r in answers[:29]] == [200] * 29
    assert locked_out(answers[29])
    assert "from your address" in answers[29].content.decode()
    assert locked_out(sign_in(Client(), CHAT, "a_member", PASSWORD, ATTACKER))
    assert signed_in(sign_in(Client(), CHAT, "a_member", PASSWORD, OWNER_HOME))


def test_a_sign_in_clears_only_its_own_account_and_address(tenant_a):
    fail(CHAT, "a_owner", ATTACKER, 4)
    # The attacker signs in to an account of their own from the same address: the
    # owner's count there must survive, or guesses could go on forever.
    assert signed_in(sign_in(Client(), CHAT, "a_member", PASSWORD, ATTACKER))
    assert locked_out(fail(CHAT, "a_owner", ATTACKER, 1)[0])
    # The owner's own successful sign-in clears the owner's count from that address.
    fail(CHAT, "a_viewer", OWNER_HOME, 4)
    assert signed_in(sign_in(Client(), CHAT, "a_viewer", PASSWORD, OWNER_HOME))
    assert [r.status_code for r in fail(CHAT, "a_viewer", OWNER_HOME, 4)] == [200] * 4


def test_a_lock_out_is_audited_once(tenant_a):
    fail(ADMIN, "a_owner", ATTACKER, 12)
    events = AuditEvent.objects.unscoped().filter(action="auth.locked_out")
    assert events.count() == 1
    event = events.get()
    assert event.ip == ATTACKER
    assert event.object_id == str(tenant_a.owner.pk)
    assert event.diff["username"] == "a_owner"
    assert event.diff["address"] == ATTACKER
    assert event.diff["scope"] == "account"
    assert event.diff["locked_until"]
    assert event.tenant_id is None


def test_x_forwarded_for_is_honoured_only_from_a_trusted_proxy(tenant_a, settings):
    # Without a trusted proxy the header is the client's to invent: ignored.
    answers = fail(CHAT, "a_owner", ATTACKER, 5, HTTP_X_FORWARDED_FOR="192.0.2.1")
    assert locked_out(answers[-1])
    assert locked_out(
        sign_in(Client(), CHAT, "a_owner", PASSWORD, ATTACKER, HTTP_X_FORWARDED_FOR="192.0.2.99")
    )
    # Behind the operator's proxy, the address the proxy saw is the client's.
    settings.CLAW_TRUSTED_PROXIES = ["10.9.0.0/16"]
    via_proxy = {"HTTP_X_FORWARDED_FOR": f"192.0.2.50, {ATTACKER}"}
    assert locked_out(sign_in(Client(), CHAT, "a_owner", PASSWORD, "10.9.0.1", **via_proxy))
    elsewhere = {"HTTP_X_FORWARDED_FOR": OWNER_HOME}
    assert signed_in(sign_in(Client(), CHAT, "a_owner", PASSWORD, "10.9.0.1", **elsewhere))


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "expected"),
    [
        ("198.51.100.1", "", [], "198.51.100.1"),
        ("198.51.100.1", "203.0.113.9", [], "198.51.100.1"),
        ("10.0.0.2", "203.0.113.9", ["10.0.0.0/8"], "203.0.113.9"),
        ("10.0.0.2", "203.0.113.9, 10.0.0.7", ["10.0.0.0/8"], "203.0.113.9"),
        ("10.0.0.2", "spoofed, 203.0.113.9", ["10.0.0.0/8"], "203.0.113.9"),
        ("10.0.0.2", "203.0.113.9, garbage", ["10.0.0.0/8"], "10.0.0.2"),
        ("10.0.0.2", "10.0.0.3", ["10.0.0.0/8"], "10.0.0.3"),
        ("::ffff:198.51.100.1", "", [], "198.51.100.1"),
        ("", "203.0.113.9", [], None),
    ],
)
def test_client_address(peer, forwarded, trusted, expected, settings, rf):
    settings.CLAW_TRUSTED_PROXIES = trusted
    request = rf.get("/", REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


def superuser():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser(username="root", email="", password=PASSWORD)


def test_a_superuser_unlocks_in_the_admin_and_it_is_audited(tenant_a):
    fail(CHAT, "a_owner", ATTACKER, 5)
    root = superuser()
    admin = Client()
    admin.force_login(root)
    changelist = reverse("admin:axes_accessattempt_changelist")
    page = admin.get(changelist)
    assert page.status_code == 200
    assert "a_owner" in page.content.decode()
    assert "(account)" in page.content.decode()
    ids = list(AccessAttempt.objects.filter(username="a_owner").values_list("pk", flat=True))
    response = admin.post(changelist, {"action": "unlock", "_selected_action": ids})
    assert response.status_code == 302
    assert not AccessAttempt.objects.filter(username="a_owner").exists()
    assert signed_in(sign_in(Client(), CHAT, "a_owner", PASSWORD, ATTACKER))
    event = AuditEvent.objects.unscoped().get(action="auth.unlocked")
    assert event.actor_id == root.pk
    assert event.diff["username"] == "a_owner"


def test_only_a_superuser_sees_or_lifts_lock_outs(tenant_a):
    fail(CHAT, "a_member", ATTACKER, 5)
    owner = Client()
    owner.force_login(tenant_a.owner)
    changelist = reverse("admin:axes_accessattempt_changelist")
    assert owner.get(changelist).status_code == 403
    ids = list(AccessAttempt.objects.values_list("pk", flat=True))
    assert owner.post(changelist, {"action": "unlock", "_selected_action": ids}).status_code == 403
    assert AccessAttempt.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_claw_unlock_lifts_an_account_or_an_address_from_the_command_line(tenant_a):
    fail(CHAT, "a_owner", ATTACKER, 5)
    make_user("other")
    fail(CHAT, "other", OWNER_HOME, 5)
    env = {**os.environ, "DATABASE_URL": database_url_for_tests()}
    done = subprocess.run(
        [sys.executable, "-m", "claw_platform.cli.main", "unlock", "a_owner", OWNER_HOME],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "account a_owner: 1 failed sign-in record(s) removed" in done.stdout
    assert f"address {OWNER_HOME}: 1 failed sign-in record(s) removed" in done.stdout
    assert signed_in(sign_in(Client(), CHAT, "a_owner", PASSWORD, ATTACKER))
    assert signed_in(sign_in(Client(), CHAT, "other", PASSWORD, OWNER_HOME))
    events = AuditEvent.objects.unscoped().filter(action="auth.unlocked").order_by("id")
    assert [e.actor_label for e in events] == ["claw unlock", "claw unlock"]
    assert [e.object_repr for e in events] == ["a_owner", OWNER_HOME]


def test_the_issue_s_attack_is_answered_with_a_lock_out(tenant_a):
    """150 wrong passwords, then the right one (issue 21, defect 4)."""
    answers = fail(ADMIN, "a_owner", ATTACKER, 150)
    assert sum(r.status_code == 200 for r in answers) == 4
    assert locked_out(sign_in(Client(), ADMIN, "a_owner", PASSWORD, ATTACKER))


@pytest.mark.django_db(transaction=True)
def test_over_real_http_the_asgi_server_locks_out_and_says_when(tenant_a):
    import re

    import httpx

    from tests.api.server import live_asgi_server

    with live_asgi_server() as base, httpx.Client(base_url=base, timeout=30) as http:
        page = http.get("/chat/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)

        def attempt(password: str) -> httpx.Response:
            return http.post(
                "/chat/login/",
                data={"username": "a_owner", "password": password, "csrfmiddlewaretoken": token},
                headers={"Referer": f"{base}/chat/login/"},
            )

        answers = [attempt("wrong password") for _ in range(5)]
        assert [r.status_code for r in answers] == [200, 200, 200, 200, 429]
        right = attempt(PASSWORD)
        assert right.status_code == 429
        assert "Too many failed sign-ins" in right.text
        assert int(right.headers["Retry-After"]) > 0
    event = AuditEvent.objects.unscoped().get(action="auth.locked_out")
    assert event.ip == "127.0.0.1"
