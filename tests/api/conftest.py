from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.runtime.worker import execute_run, shutdown_supervisor
from claw_platform.api.actions.keys import do_create_api_key
from tests.agents.conftest import live_agent  # noqa: F401  (shared fixture)


def make_key(tenant_set: Any, *scopes: str, name: str = "test key") -> str:
    _key, plaintext = do_create_api_key(
        tenant_set.tenant, name=name, scopes=list(scopes or ["admin"]), acting_user=tenant_set.owner
    )
    return plaintext


def client_for(key: str | None = None) -> APIClient:
    client = APIClient()
    if key:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def inline_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs start when their transaction commits, in this process's worker loop (the
    same ``execute_run`` a django-q2 worker calls), instead of through the queue."""
    monkeypatch.setattr("agents.actions.runs.enqueue_run", lambda run_id: execute_run(run_id))
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
