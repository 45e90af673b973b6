"""M2, E15, E16, M6: hybrid recall puts the right memories into the prompt (the
vector half for a paraphrase, the text half for an exact code), never another
user's or tenant's, within the token budget; the injection is logged."""

from __future__ import annotations

import pytest

from agents.actions.conversation import do_create_session
from agents.memory.embedders import LocalEmbedder
from agents.memory.embedding import embed_memories
from agents.memory.injection import recall_for_turn, session_owner
from agents.memory.recall import RecallSettings, recall
from agents.models import MemoryEntry, MemoryInjection

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = [
    "The quarterly report is due on the first Monday of the month",
    "The staging server runs in the Frankfurt data centre",
    "Deployments are frozen during the last week of December",
    "The design team meets on Thursdays at ten",
    "Invoices are approved by the finance lead",
    "The office wifi password rotates every ninety days",
    "Backups are kept for thirty five days",
    "The mobile app is written in Kotlin and Swift",
]


def remember(ts, content, *, scope="user", user=None, tenant=None, agent=None):
    tenant = tenant or ts.tenant
    return MemoryEntry.objects.unscoped().create(
        tenant=tenant,
        scope=scope,
        agent=agent or ts.agent,
        user=(user or ts.member) if scope == "user" else None,
        content=content,
    )


@pytest.fixture
def memories(tenant_a, tenant_b):
    for text in FILLER:
        remember(tenant_a, text, scope="tenant")
    tea = remember(tenant_a, "Sam likes green tea with honey, never coffee")
    code = remember(tenant_a, "The door code for the server room is QX-7734-B")
    other_user = remember(tenant_a, "Prefers oolong tea and a quiet desk", user=tenant_a.admin)
    other_tenant = remember(tenant_b, "Likes jasmine tea in the afternoon", user=tenant_b.member)
    embed_memories()
    assert not MemoryEntry.objects.unscoped().filter(embedding__isnull=True).exists()
    return {"tea": tea, "code": code, "other_user": other_user, "other_tenant": other_tenant}


def test_local_embedder_loads_offline_from_the_wheel():
    # The network is blocked for every test (tests.fakes.network): nothing is downloaded.
    embedder = LocalEmbedder()
    vectors = embedder.embed(["a cup of tea", "a hot drink", "a tax return"])
    assert len(vectors) == 3
    assert all(len(v) == 256 for v in vectors)
    tea, drink, tax = vectors
    dot = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert dot(tea, drink) > dot(tea, tax)


def test_a_paraphrase_is_recalled_by_its_meaning(tenant_a, memories):
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "What hot drink should I bring?")
    assert found.selected
    assert found.selected[0].id == memories["tea"].pk
    tea = found.selected[0]
    assert tea.vector is not None
    assert tea.keyword is None


def test_an_exact_code_reaches_the_top_three(tenant_a, memories):
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "QX-7734-B")
    assert memories["code"].pk in [c.id for c in found.selected[:3]]


def test_recall_never_crosses_users_or_tenants(tenant_a, memories):
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    seen = {c.id for c in recall(owner, "which tea does she like, oolong or jasmine?").candidates}
    assert memories["tea"].pk in seen
    assert memories["other_user"].pk not in seen
    assert memories["other_tenant"].pk not in seen


def test_the_prompt_gets_the_memory_and_the_run_gets_the_log(tenant_a, memories):
    session = do_create_session(tenant_a.agent, user=tenant_a.member)
    snippets = recall_for_turn(session, "What hot drink should I bring?", None)
    assert snippets[0] == memories["tea"].content
    log = MemoryInjection.objects.unscoped().get(session=session)
    assert log.selected[0] == memories["tea"].pk
    assert log.tokens > 0
    assert log.method == "weighted"
    assert any(c["id"] == memories["tea"].pk and c["selected"] for c in log.candidates)


def test_group_chats_leave_personal_memory_out(tenant_a, memories):
    session = do_create_session(tenant_a.agent, user=tenant_a.member)
    session.is_group = True
    session.save(update_fields=["is_group"])
    snippets = recall_for_turn(session, "What hot drink should I bring? green tea?", None)
    assert memories["tea"].content not in snippets


def test_recall_stays_within_the_token_budget(tenant_a, memories):
    for n in range(6):
        remember(tenant_a, f"Tea note {n}: " + "green tea is the user's favourite drink. " * 20)
    embed_memories()
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "green tea", cfg=RecallSettings(max_tokens=500))
    assert 0 < found.tokens <= 500
    assert len(found.selected) <= 5


def test_a_memory_without_a_vector_is_found_by_text(tenant_a):
    entry = remember(tenant_a, "The boat is moored at pier 39")
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "pier 39")
    assert [c.id for c in found.selected] == [entry.pk]


def test_rrf_fusion_ranks_the_code_first(tenant_a, memories):
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    found = recall(owner, "server room code QX-7734-B", cfg=RecallSettings(method="rrf"))
    assert found.selected[0].id == memories["code"].pk


def test_an_empty_search_recalls_nothing(tenant_a, memories):
    owner = session_owner(do_create_session(tenant_a.agent, user=tenant_a.member))
    assert recall(owner, "   ").candidates == []
