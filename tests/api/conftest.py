from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.runtime.worker import execute_run, shutdown_supervisor
from claw_platform.api.actions.keys import do_create_api_key


def make_key(tenant_set: Any, *scopes: str, name: str = "test key") -> str:
    """A key the operator made (``claw apikey create``): no person behind it, it acts
    for the whole tenant within its scopes."""
    _key, plaintext = do_create_api_key(
        tenant_set.tenant, name=name, scopes=list(scopes or ["admin"]), acting_user=tenant_set.owner
    )
    return plaintext


def make_person_key(tenant_set: Any, user: Any, *scopes: str, name: str = "person key") -> str:
    """A key ``user`` made (the admin, ``POST /api/v1/api-keys/``): it acts as them,
    with their current role."""
    _key, plaintext = do_create_api_key(
        tenant_set.tenant, name=name, scopes=list(scopes or ["admin"]), created_by=user, acting_user=user
    )
    return plaintext


def login_client(user: Any) -> APIClient:
    """The API with ``user``'s login cookie (as the browser sends it)."""
    client = APIClient()
    client.force_login(user)
    return client


def client_for(key: str | None = None) -> APIClient:
    client = APIClient()
    if key:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def inline_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs start when their transaction commits, in this process's worker loop (the
    same ``execute_run`` a django-q2 worker calls), instead of through the queue."""
    from django.db import transaction

    monkeypatch.setattr("agents.actions.runs.enqueue_run", lambda run_id: execute_run(run_id))
    monkeypatch.setattr(
        "agents.actions.runs.enqueue_run_with_commit",
        lambda run_id: transaction.on_commit(lambda: execute_run(run_id)),
    )
    # Runs written in a batch (agents.actions.message_batch: routine fires) too.
    monkeypatch.setattr("agents.actions.message_batch.run_batch_task", lambda run_ids: None)
    monkeypatch.setattr(
        "agents.actions.message_batch.queue_batch_task",
        lambda run_ids: [execute_run(run_id) for run_id in run_ids],
    )
    try:
        yield
    finally:
        shutdown_supervisor()


def body_of(response: Any) -> Any:
    """JSON of a response, streamed or not."""
    import json

    if getattr(response, "streaming", False):
        return json.loads(b"".join(response))
    return response.json()


@pytest.fixture(autouse=True)
def _in_process_channel_layer(settings: Any) -> Iterator[None]:
    """These tests run server, runs and clients in one process: the in-memory layer
    serves them, and the PostgreSQL layer's state (its listener is bound to the
    event loop that first used it) stays as the channel tests expect it. The API's
    listeners also read the database, so a late wake-up costs a poll, not an event.
    bench/api runs the real processes over the PostgreSQL layer."""
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
