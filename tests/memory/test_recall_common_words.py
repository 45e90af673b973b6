"""M2 under load: the keyword half ranks a bounded candidate set for any word. A word
in a large share of a tenant's memories brings only its newest
``keyword_term_rows`` matches to ts_rank; a rare word (an exact code) brings all of
its matches, so the code still reaches the top 3 beside a common word. Run as the
product runs: the runtime role inside the tenant's context (row-level security)."""

from __future__ import annotations

import pytest
from django.db import connection

from agents.memory.recall import RecallSettings, recall
from agents.memory.store import MemoryOwner
from claw_platform.tenancy.context import no_tenant, tenant_context

pytestmark = pytest.mark.django_db

COMMON_ROWS = 600
TERM_ROWS = 50


def store(ts, contents):  # type: ignore[no-untyped-def]
    """Rows without vectors (found by text alone), in the order given (ids ascending)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agents_memoryentry (tenant_id, scope, category, agent_id, content, "
            "embedder, embed_error, created_at, updated_at) "
            "SELECT %s, 'agent', 'core', %s, c, '', '', now(), now() "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t(c, o) ORDER BY o RETURNING id",
            [ts.tenant.pk, ts.agent.pk, list(contents)],
        )
        return sorted(row[0] for row in cursor.fetchall())


@pytest.fixture
def common(tenant_a, tenant_b):  # type: ignore[no-untyped-def]
    # The code is the oldest memory: the common word's newest matches never include it.
    code_id, old_log, *rest = store(
        tenant_a,
        ["daily stand-up: the vault code is ZX-4471", "daily daily daily daily: the old log"]
        + [f"daily note {i} about the weekly plan" for i in range(COMMON_ROWS)],
    )
    other = store(tenant_b, ["daily: tenant B keeps code ZX-4471 too"])[0]
    return code_id, old_log, rest, other


def as_product(ts, text, cfg):  # type: ignore[no-untyped-def]
    owner = MemoryOwner(tenant_id=ts.tenant.pk, agent_id=ts.agent.pk, user_id=None)
    with tenant_context(ts.tenant.pk):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT r.rolsuper OR r.rolbypassrls FROM pg_roles r WHERE r.rolname = current_user"
            )
            assert cursor.fetchone()[0] is False  # the runtime role: the policy applies
        return recall(owner, text, cfg=cfg)


def test_a_common_word_ranks_only_its_newest_matches(tenant_a, common):
    _code, old_log, rest, _other = common
    cfg = RecallSettings(floor=0.0, keyword_term_rows=TERM_ROWS)
    found = as_product(tenant_a, "daily", cfg)
    by_text = [c for c in found.candidates if c.keyword_rank]
    assert len(by_text) == cfg.limit * cfg.candidate_factor  # a full answer
    newest = set(sorted(rest)[-TERM_ROWS:])
    assert {c.id for c in by_text} <= newest  # never a ts_rank over all 602 matches
    # The old row that says "daily" four times would rank first over all of them: the
    # price of a bounded ranking, which a rare word beside it does not pay (below).
    assert old_log not in {c.id for c in found.candidates}


def test_an_exact_code_beside_a_common_word_reaches_the_top_three(tenant_a, common):
    code, _old, _rest, other = common
    cfg = RecallSettings(floor=0.0, keyword_term_rows=TERM_ROWS)
    for text in ("daily ZX-4471", "what is the daily vault code ZX-4471 of the weekly plan"):
        found = as_product(tenant_a, text, cfg)
        assert code in [c.id for c in found.candidates[:3]], text
        assert min((c for c in found.candidates if c.keyword_rank), key=lambda c: c.keyword_rank).id == code
        assert other not in {c.id for c in found.candidates}  # tenant B's row: row-level security


def test_the_rare_word_alone_finds_all_of_its_rows(tenant_a, common):
    code, _old, _rest, _other = common
    found = as_product(tenant_a, "ZX-4471", RecallSettings(floor=0.0, keyword_term_rows=TERM_ROWS))
    assert [c.id for c in found.candidates if c.keyword_rank] == [code]


def test_the_word_lookup_answers_only_for_the_tenant_in_context(tenant_a, tenant_b, common):
    code, _old, _rest, other = common

    def hits(tenant_id):  # type: ignore[no-untyped-def]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM claw_memory_term_hits(%s, %s, NULL, NULL, to_tsquery('simple', 'zx'), 10)",
                [tenant_id, tenant_b.agent.pk if tenant_id == tenant_b.tenant.pk else tenant_a.agent.pk],
            )
            return {row[0] for row in cursor.fetchall()}

    with tenant_context(tenant_a.tenant.pk):
        assert hits(tenant_a.tenant.pk) == {code}
        assert hits(tenant_b.tenant.pk) == set()  # another tenant's words: nothing
    with no_tenant():
        assert hits(tenant_b.tenant.pk) == set()  # strict: no tenant in context, nothing
    with tenant_context(tenant_b.tenant.pk):
        assert hits(tenant_b.tenant.pk) == {other}
