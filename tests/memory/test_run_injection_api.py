"""M6 through the API on the run: ``GET runs/<id>/`` carries what memory recall put
into that run's prompt (candidates with scores, selected ids, tokens); the member
rule holds (another member's run is a 404)."""

from __future__ import annotations

import pytest

from agents.models import MemoryInjection
from tests.api.conftest import login_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_runs_page_shows_its_memory_injection(member_chats):
    ts = member_chats.tenant_set
    log = MemoryInjection.objects.unscoped().create(
        tenant=ts.tenant,
        session=member_chats.session,
        run=member_chats.run,
        query="what do I drink?",
        method="weighted",
        candidates=[{"id": 5, "vector": 0.91, "keyword": 0.0, "score": 0.64, "selected": True}],
        selected=[5],
        tokens=12,
    )
    url = f"/api/v1/runs/{member_chats.run.pk}/"
    run = login_client(member_chats.m1).get(url)
    assert run.status_code == 200
    assert len(run.json()["memory"]) == 2
    # The fixture's own log of that run first, then this one.
    assert run.json()["memory"][-1:] == [
        {
            "id": log.pk,
            "query": "what do I drink?",
            "method": "weighted",
            "candidates": [{"id": 5, "vector": 0.91, "keyword": 0.0, "score": 0.64, "selected": True}],
            "selected": [5],
            "tokens": 12,
            "is_group": False,
        }
    ]
    assert login_client(member_chats.m2).get(url).status_code == 404
    # The list stays as it was (no log per row).
    listed = login_client(member_chats.m1).get("/api/v1/runs/").json()["results"]
    assert all("memory" not in row for row in listed)
