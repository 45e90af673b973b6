"""D1: /healthz and /readyz through Django's test client."""

from __future__ import annotations

from typing import Any

import pytest
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


def test_readyz_is_503_and_names_the_workers_without_a_heartbeat(
    client: Any, db: Any, channel_layer_on_test_database: None
) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["workers"]["ok"] is False
    assert "no worker heartbeat" in body["checks"]["workers"]["detail"]
    assert body["checks"]["database"]["ok"] is True


def test_readyz_is_200_once_a_worker_beats(
    client: Any, db: Any, channel_layer_on_test_database: None
) -> None:
    beat("test-host:1234", timezone.now())
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    checks = response.json()["checks"]
    assert checks["workers"]["ok"]
    assert "test-host:1234" in checks["workers"]["detail"]
    assert checks["channel layer"]["ok"]


def test_readyz_refuses_post(client: Any) -> None:
    assert client.post("/readyz").status_code == 405
