"""M2 at scale: a tenant holding 1 % of the stored vectors gets its full answer from the
HNSW index (pgvector applies the tenant filter after the index scan; the iterative
scan keeps going until enough of the tenant's rows are found), recall in one
statement, and the per-process caches follow an embedder change."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from agents.actions.config import do_create_model_profile, do_create_provider
from agents.memory import recall as recall_module
from agents.memory.recall import RecallSettings, recall, tenant_embedder, vector_literal
from agents.memory.store import MemoryOwner

pytestmark = pytest.mark.django_db

DIM = 256


def store_vectors(tenant, agent, vectors):  # type: ignore[no-untyped-def]
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO agents_memoryentry (tenant_id, scope, category, agent_id, content, embedding, "
            "embedding_dim, embedder, embed_error, created_at, updated_at) "
            "VALUES (%s, 'agent', 'core', %s, %s, %s::vector, %s, 'test', '', now(), now())",
            [
                (tenant.pk, agent.pk, f"note {i} of {tenant.slug}", vector_literal(v), DIM)
                for i, v in enumerate(vectors)
            ],
        )


def clustered(rng, centers, n):  # type: ignore[no-untyped-def]
    vecs = centers[rng.integers(0, len(centers), n)] + 0.6 * rng.standard_normal((n, DIM))
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def test_a_tenant_with_one_percent_of_the_rows_gets_its_full_answer_from_hnsw(tenant_a, tenant_b):
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((20, DIM))
    # 1 %: 20 rows of tenant A among 2,000; the clusters independent of the tenants.
    store_vectors(tenant_b.tenant, tenant_b.agent, clustered(rng, centers, 1_980))
    mine = clustered(rng, centers, 20)
    store_vectors(tenant_a.tenant, tenant_a.agent, mine)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE agents_memoryentry")
    owner = MemoryOwner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk, user_id=None)
    query = clustered(rng, centers, 1)[0]
    exact = recall(owner, "note", cfg=RecallSettings(limit=5, floor=0.0), query_vector=query)
    truth = {c.id for c in exact.candidates if c.vector_rank}
    assert len(truth) == 20  # the exact scan: all of the tenant's rows (n = 4 x 5)

    with transaction.atomic(), connection.cursor() as cursor:
        # No sorting allowed: the only plan that orders by distance is the HNSW index
        # (on this small table the planner would rather sort the tenant's 20 rows).
        cursor.execute("SET LOCAL enable_sort = off")
        index_cfg = RecallSettings(limit=5, floor=0.0, exact_scan_rows=0)
        sql, params = recall_module.recall_statement(
            cursor, owner, "note", cfg=index_cfg, vector=query, dim=DIM
        )
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "memory_embedding_256" in plan
        found = recall(
            owner, "note", cfg=RecallSettings(limit=5, floor=0.0, exact_scan_rows=0), query_vector=query
        )
        # Without the iterative scan, ef_search 100 over 2,000 rows finds about one row of A.
        cursor.execute("SET LOCAL hnsw.iterative_scan = off")
        cursor.execute(sql, params)
        assert sum(1 for row in cursor.fetchall() if row[7] is not None) < 10
    by_vector = sorted((c for c in found.candidates if c.vector_rank), key=lambda c: c.vector_rank)
    assert len(by_vector) == 20
    assert {c.id for c in by_vector} == truth
    assert [c.vector_rank for c in by_vector] == list(range(1, 21))
    similarities = [c.vector for c in by_vector]
    assert similarities == sorted(similarities, reverse=True)  # relaxed order, re-sorted
    assert all(c.content.endswith(tenant_a.tenant.slug) for c in found.candidates)


def test_keyword_ranks_follow_the_text_score(tenant_a):
    store_vectors(tenant_a.tenant, tenant_a.agent, np.eye(DIM)[:3])
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_memoryentry SET content = CASE content "
            "WHEN %s THEN 'zebra' WHEN %s THEN 'zebra zebra zebra crossing' ELSE 'zebra crossing' END "
            "WHERE tenant_id = %s",
            [f"note 0 of {tenant_a.tenant.slug}", f"note 1 of {tenant_a.tenant.slug}", tenant_a.tenant.pk],
        )
    owner = MemoryOwner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk, user_id=None)
    found = recall(owner, "zebra crossing", cfg=RecallSettings(floor=0.0), query_vector=np.eye(DIM)[0])
    by_text = sorted(found.candidates, key=lambda c: c.keyword_rank)
    assert by_text[0].content == "zebra zebra zebra crossing"
    assert [c.keyword for c in by_text] == sorted((c.keyword for c in by_text), reverse=True)
    assert [c.keyword_rank for c in by_text] == [1, 2, 3]
    assert found.candidates[0].vector_rank is not None


def test_the_embedder_cache_follows_a_profile_change(tenant_a):
    recall_module.forget_cached()
    local = tenant_embedder(tenant_a.tenant.pk)
    assert local.dimension == 256
    assert tenant_embedder(tenant_a.tenant.pk) is local  # cached: no query per turn
    provider = do_create_provider(
        tenant_a.tenant,
        name="embeddings",
        kind="openai_compatible",
        base_url="http://127.0.0.1:9/v1",
        api_key="sk-test-0123456789",
    )
    do_create_model_profile(provider, model="e", kind="embedding", dimension=1536, use_for_memory=True)
    assert tenant_embedder(tenant_a.tenant.pk).dimension == 1536  # the save dropped the cache
