"""D1: /healthz and /readyz through Django's test client."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from claw_platform import config
from claw_platform.ops.heartbeat import beat


@pytest.fixture
def channel_layer_on_test_database(settings: Any) -> None:
    """Settings built the channel layer for the database named before pytest-django
    switched to the test one; point it at the test database, as the product would."""
    settings.CHANNEL_LAYERS = {
        "default": config.channel_layer_config("postgres", dict(connection.settings_dict))
    }


def test_healthz_answers_without_touching_anything(client: Any) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.fixture
def staff_client(client: Any, db: Any) -> Any:
    user = get_user_model().objects.create_user(username="operator", password="x" * 20, is_staff=True)
    client.force_login(user)
    return client


def test_readyz_is_503_and_names_the_workers_without_a_heartbeat(
    staff_client: Any, channel_layer_on_test_database: None
) -> None:
    response = staff_client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["workers"]["ok"] is False
    assert "no worker heartbeat" in body["checks"]["workers"]["detail"]
    assert body["checks"]["database"]["ok"] is True


def test_readyz_is_200_once_a_worker_beats(staff_client: Any, channel_layer_on_test_database: None) -> None:
    beat("test-host:1234", timezone.now())
    response = staff_client.get("/readyz")
    assert response.status_code == 200, response.json()
    checks = response.json()["checks"]
    assert checks["workers"]["ok"]
    assert "test-host:1234" in checks["workers"]["detail"]
    assert checks["channel layer"]["ok"]


@pytest.mark.parametrize("who", ["anonymous", "member"])
def test_readyz_tells_others_the_status_and_the_failing_check_but_no_details(
    who: str, client: Any, db: Any, channel_layer_on_test_database: None
) -> None:
    if who == "member":
        client.force_login(get_user_model().objects.create_user(username="someone", password="x" * 20))
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready",
        "checks": {"database": {"ok": True}, "channel layer": {"ok": True}, "workers": {"ok": False}},
    }
    beat("secret-host.internal:1234", timezone.now())
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"]["workers"] == {"ok": True}
    text = response.content.decode()
    assert "secret-host" not in text
    assert "PostgreSQL" not in text
    assert connection.settings_dict["NAME"] not in text


def test_readyz_refuses_post(client: Any) -> None:
    assert client.post("/readyz").status_code == 405
