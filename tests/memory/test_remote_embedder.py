"""P7: the remote embedder -- an embedding model profile on an OpenAI-compatible
provider, called over real HTTP (tests.fakes.fake_embeddings), charged through the
budget guard with usage of purpose ``embedding``; switching a tenant's embedder
re-embeds its memories; an embedder that is down, refused or of the wrong dimension
keeps the memory, found by text."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction

from agents.actions.config import do_create_model_profile, do_create_provider
from agents.actions.conversation import do_create_session
from agents.budgets.models import Budget
from agents.memory.embedders import LocalEmbedder, embedder_for_tenant
from agents.memory.embedding import embed_memories
from agents.memory.injection import session_owner
from agents.memory.recall import recall
from agents.memory.remote_embedder import RemoteEmbedder
from agents.models import MemoryEntry, UsageRecord
from tests.fakes.fake_embeddings import FakeEmbeddings

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake_embeddings():
    fake = FakeEmbeddings(dimension=1536).start()
    yield fake
    fake.stop()


def remote_profile(ts, fake, **fields):
    provider = do_create_provider(
        ts.tenant,
        name="embeddings",
        kind="openai_compatible",
        base_url=fake.base_url,
        api_key="sk-embed-secret-0123456789",
    )
    values = {"kind": "embedding", "dimension": 1536, "use_for_memory": True, "input_price": Decimal("100")}
    return do_create_model_profile(provider, model="text-embedding-3-small", **(values | fields))


def remember(ts, content):
    return MemoryEntry.objects.unscoped().create(
        tenant=ts.tenant, scope="user", agent=ts.agent, user=ts.member, content=content
    )


def test_a_tenant_embedder_change_re_embeds_remotely_charged_and_recorded(
    tenant_a, tenant_b, fake_embeddings
):
    tea = remember(tenant_a, "Sam likes green tea with honey")
    remember(tenant_a, "The staging server runs in Frankfurt")
    other = MemoryEntry.objects.unscoped().create(
        tenant=tenant_b.tenant, scope="tenant", agent=tenant_b.agent, content="B's own note"
    )
    embed_memories()
    assert set(MemoryEntry.objects.unscoped().values_list("embedding_dim", flat=True)) == {256}
    budget = Budget.objects.unscoped().create(tenant=tenant_a.tenant, limit=Decimal("1"), period="month")

    profile = remote_profile(tenant_a, fake_embeddings)
    # The change dropped tenant A's local vectors (re-embedded in the background), not B's.
    assert not MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant, embedding__isnull=False).exists()
    assert MemoryEntry.objects.unscoped().get(pk=other.pk).embedding_dim == 256
    assert isinstance(embedder_for_tenant(tenant_a.tenant.pk), RemoteEmbedder)
    assert isinstance(embedder_for_tenant(tenant_b.tenant.pk), LocalEmbedder)

    count = MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant).count()  # the fixtures' too
    assert embed_memories(tenant_id=tenant_a.tenant.pk) == count
    entry = MemoryEntry.objects.unscoped().get(pk=tea.pk)
    assert entry.embedding_dim == 1536
    assert entry.embedder == f"remote:{profile.pk}:text-embedding-3-small:1536"
    sent = fake_embeddings.requests[-1]
    assert sent["headers"]["Authorization"] == "Bearer sk-embed-secret-0123456789"
    assert sent["body"]["model"] == "text-embedding-3-small"
    assert {"Sam likes green tea with honey", "The staging server runs in Frankfurt"} <= set(
        sent["body"]["input"]
    )
    tokens = sum(len(text.split()) + 1 for text in sent["body"]["input"])  # the fake's count

    usage = UsageRecord.objects.unscoped().get(tenant=tenant_a.tenant, purpose="embedding")
    assert usage.input_tokens == tokens
    assert usage.cost == Decimal(tokens) * Decimal("100") / Decimal(1_000_000)
    assert usage.model == "text-embedding-3-small"
    budget.refresh_from_db()
    assert budget.spent == usage.cost
    assert budget.reserved == 0

    # Recall embeds the question with the same embedder; the vector half finds the tea.
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "green tea")
    assert found.selected[0].id == tea.pk
    assert found.selected[0].vector is not None
    assert found.selected[0].vector > 0.5
    assert UsageRecord.objects.unscoped().filter(tenant=tenant_a.tenant, purpose="embedding").count() == 2

    # Back to the local embedder: re-embedded again, 256-d.
    profile.use_for_memory = False
    with transaction.atomic():
        profile.save()
    assert not MemoryEntry.objects.unscoped().filter(tenant=tenant_a.tenant, embedding__isnull=False).exists()
    embed_memories(tenant_id=tenant_a.tenant.pk)
    assert MemoryEntry.objects.unscoped().get(pk=tea.pk).embedding_dim == 256


@pytest.mark.parametrize(
    ("fault", "message"),
    [({"dimension": 768}, "returned 768 dimensions, not 1536"), ({"status": 503}, "answered HTTP 503")],
)
def test_a_wrong_or_failing_embedder_keeps_the_memory_found_by_text(
    tenant_a, fake_embeddings, fault, message
):
    remote_profile(tenant_a, fake_embeddings)
    for name, value in fault.items():
        setattr(fake_embeddings, name, value)
    entry = remember(tenant_a, "The boat is moored at pier 39")
    assert embed_memories() == 0
    entry.refresh_from_db()
    assert entry.embedding is None
    assert message in entry.embed_error
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "pier 39")
    assert [c.id for c in found.selected] == [entry.pk]
    assert message in found.embed_error
    # Once the embedder is back, the schedule's sweep embeds it.
    fake_embeddings.dimension, fake_embeddings.status = 1536, 200
    pending = MemoryEntry.objects.unscoped().filter(embedding__isnull=True).count()
    assert embed_memories() == pending
    entry.refresh_from_db()
    assert entry.embedding_dim == 1536
    assert entry.embed_error == ""


def test_a_budget_refusal_stops_the_call_before_it_is_made(tenant_a, fake_embeddings):
    remote_profile(tenant_a, fake_embeddings)
    Budget.objects.unscoped().create(tenant=tenant_a.tenant, limit=Decimal("0"), period="month")
    entry = remember(tenant_a, "Invoices are approved by the finance lead")
    assert embed_memories() == 0
    entry.refresh_from_db()
    assert entry.embedding is None
    assert "was not called" in entry.embed_error
    assert fake_embeddings.requests == []
    refused = UsageRecord.objects.unscoped().get(tenant=tenant_a.tenant, purpose="embedding")
    assert refused.input_tokens == 0
    assert "budget" in refused.error

    # An embedding profile needs its dimension; only an embedding model embeds memories.
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="dimension"):
        do_create_model_profile(embeddings_provider(tenant_a), model="no-dim", kind="embedding")
    with pytest.raises(ValidationError, match="Only an embedding model"):
        do_create_model_profile(tenant_a.provider, model="chat-x", use_for_memory=True)


def embeddings_provider(ts):
    from agents.models import LLMProvider

    return LLMProvider.objects.unscoped().get(tenant=ts.tenant, name="embeddings")
