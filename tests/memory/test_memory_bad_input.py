"""Issue 25's Bad input through the API: an empty search (blank, or only punctuation)
and an over-long memory are a 400 naming the field; nothing is written."""

from __future__ import annotations

import pytest

from agents.models import MemoryEntry
from tests.api.conftest import login_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_empty_search_and_an_over_long_memory_name_their_field(tenant_a):
    client = login_client(tenant_a.member)
    for query in ("", "   ", "?! …"):
        answer = client.post("/api/v1/memory/search/", {"query": query, "agent": "assistant"}, format="json")
        assert answer.status_code == 400, query
        assert "query" in answer.json()["error"]["fields"], query
    words = client.post("/api/v1/memory/search/", {"query": "tea?", "agent": "assistant"}, format="json")
    assert words.status_code == 200
    before = MemoryEntry.objects.unscoped().count()
    too_long = client.post("/api/v1/memory/", {"content": "x" * 4_001}, format="json")
    assert too_long.status_code == 400
    assert "content" in too_long.json()["error"]["fields"]
    assert MemoryEntry.objects.unscoped().count() == before
