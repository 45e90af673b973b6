"""The admin's memory pages (issue 25, item 9 and Bad input): filters by scope,
category, agent and user, search; an over-long memory or a scope without its owner
is a form error, not a database one; re-embed; an embedder failure says so on the
list; the review's provenance and archive reasons show on an entry."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.models import MemoryEntry

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "admin:agents_memoryentry_changelist"


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def entry(ts: Any, content: str, *, scope: str = "user", user: Any = None, **extra: Any) -> MemoryEntry:
    return MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant,
        scope=scope,
        agent=ts.agent,
        user=(user or ts.member) if scope == "user" else None,
        content=content,
        **extra,
    )


def listed(client: Client, **query: Any) -> str:
    page = client.get(reverse(LIST), query)
    assert page.status_code == 200
    return page.content.decode()


def test_filters_and_search_narrow_the_list(tenant_a: Any, tenant_b: Any) -> None:
    entry(tenant_a, "Member likes window seats")
    entry(tenant_a, "Admin likes aisle seats", user=tenant_a.admin)
    entry(tenant_a, "Deploys are on Tuesday", scope="agent")
    entry(tenant_a, "An old daily note", category="archived")
    entry(tenant_b, "Tenant B likes trains", user=tenant_b.member)
    owner = client_of(tenant_a.owner)

    everything = listed(owner)
    assert "Member likes window seats" in everything
    assert "Tenant B likes trains" not in everything
    by_user = listed(owner, user=tenant_a.admin.pk)
    assert "Admin likes aisle seats" in by_user
    assert "Member likes window seats" not in by_user
    assert "Deploys are on Tuesday" not in by_user
    # The user filter offers the tenant's members who have memories, no one else.
    assert f"?user={tenant_a.admin.pk}" in everything
    assert f"?user={tenant_b.member.pk}" not in everything
    assert "Member likes" not in listed(owner, user="x")
    assert "Deploys are on Tuesday" in listed(owner, scope="agent")
    assert "Member likes" not in listed(owner, scope="agent")
    archived = listed(owner, category="archived")
    assert "An old daily note" in archived
    assert "Deploys" not in archived
    assert "Deploys are on Tuesday" in listed(owner, agent__id__exact=tenant_a.agent.pk)
    searched = listed(owner, q="aisle")
    assert "Admin likes aisle seats" in searched
    assert "window seats" not in searched


def test_bad_input_is_a_form_error_and_nothing_is_lost(tenant_a: Any) -> None:
    memory = entry(tenant_a, "Likes green tea")
    owner = client_of(tenant_a.owner)
    change = reverse("admin:agents_memoryentry_change", args=[memory.pk])
    form = {
        "scope": "user",
        "category": "core",
        "agent": tenant_a.agent.pk,
        "user": tenant_a.member.pk,
        "content": "x" * 4_001,
    }
    too_long = owner.post(change, form)
    assert too_long.status_code == 200
    assert "A memory is at most 4000 characters" in too_long.content.decode()
    memory.refresh_from_db()
    assert memory.content == "Likes green tea"

    no_user = owner.post(reverse("admin:agents_memoryentry_add"), {**form, "user": "", "content": "Hello"})
    assert no_user.status_code == 200
    assert "A personal (user) memory names its user." in no_user.content.decode()
    no_agent = owner.post(
        reverse("admin:agents_memoryentry_add"), {**form, "scope": "agent", "agent": "", "content": "Hello"}
    )
    assert "An agent memory names its agent." in no_agent.content.decode()
    blank = owner.post(change, {**form, "content": "   "})
    assert blank.status_code == 200
    assert MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).count() == 2  # with the fixture's

    saved = owner.post(change, {**form, "content": "Likes green tea, no sugar"})
    assert saved.status_code == 302
    memory.refresh_from_db()
    assert (memory.content, memory.embedding_dim) == ("Likes green tea, no sugar", None)


def test_re_embed_and_the_embedders_error_on_the_list(tenant_a: Any) -> None:
    failing = entry(tenant_a, "Pier 39", embed_error="the embedder answered 256 dimensions, expected 1536")
    owner = client_of(tenant_a.owner)
    page = listed(owner)
    assert "1 failed (see embed error), retried every minute." in page
    assert "the embedder answered 256 dimensions, expected 1536" in page

    done = owner.post(
        reverse(LIST), {"action": "reembed_selected", "_selected_action": [failing.pk]}, follow=True
    )
    assert "1 memories will be embedded again in the background." in done.content.decode()
    failing.refresh_from_db()
    assert failing.embed_error == ""
    # A member cannot re-embed (nor change) memories.
    member = client_of(tenant_a.member)
    refused = member.post(reverse(LIST), {"action": "reembed_selected", "_selected_action": [failing.pk]})
    assert refused.status_code in (200, 302, 403)
    failing.refresh_from_db()
    assert failing.embed_error == ""


def test_an_entry_shows_the_reviews_provenance_and_archive_reason(tenant_a: Any) -> None:
    merged = entry(
        tenant_a,
        "Likes green tea, no sugar",
        merged_from=[{"id": 7, "content": "Drinks tea without sugar", "category": "daily"}],
    )
    stale = entry(
        tenant_a, "Flies to Lisbon in March", category="archived", archive_reason="The trip is over"
    )
    owner = client_of(tenant_a.owner)
    page = owner.get(reverse("admin:agents_memoryentry_change", args=[merged.pk])).content.decode()
    assert "Drinks tea without sugar" in page
    page = owner.get(reverse("admin:agents_memoryentry_change", args=[stale.pk])).content.decode()
    assert "The trip is over" in page
