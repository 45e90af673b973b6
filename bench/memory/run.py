#!/usr/bin/env python
"""Memory benchmarks (issue 25): embedding throughput, recall quality, recall at scale.

    .venv/bin/python bench/memory/run.py [--rows 1000000] [--tenants 100] [--queries 200]
                                         [--skip-scale]

Starts its own embedded PostgreSQL 18 + pgvector in a temporary folder, migrates it,
and prints:

1. local embedding throughput: WordLlama (256-d) on distinct short texts, texts/s
   (target >= 5,000);
2. recall@5 on the labelled retrieval set (tests/memory/retrieval_set.py: 240
   memories, 120 questions) for keyword-only, vector-only and hybrid ranking, all
   from the product's ``agents.memory.recall``;
3. at scale: ``--rows`` memories of 256 dimensions across ``--tenants`` tenants
   (synthetic, clustered vectors; the clusters independent of the tenants), loaded
   by binary COPY; the HNSW index's build time and size; for queries of one tenant
   (1 %): recall@10 against exact search and the hybrid recall's latency p50 / p95,
   on the path the product chooses (exact scan for a tenant with few rows) and on
   the HNSW path with iterative scans (target recall@10 >= 0.95 at p95 < 15 ms),
   for rare-word queries and, separately, for common-word queries (words in all,
   50 %, 10 % and 2 % of the rows, half of them with a word only one of the tenant's
   memories holds, which must reach the keyword top 3).

As the product runs: the owner role (DATABASE_OWNER_URL) only migrates, sets up and
loads the data and builds the index; every measured query runs as the runtime role
(DATABASE_URL, claw_app: strict row-level security) inside the tenant's context,
through ``agents.memory.recall``. The plans of the measured statements, by EXPLAIN
(ANALYZE, BUFFERS) as claw_app, go to ``plans.txt`` in the data folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BUILD_NOTE = Path("scale-build.json")  # set in main(): inside the data folder
PLANS = Path("plans.txt")  # likewise: the EXPLAIN (ANALYZE, BUFFERS) of each measured set
# The indexes the keyword half may use, as named in its plan.
KEYWORD_INDEXES = ("memory_tenant_terms", "memory_tenant_search")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput() -> None:
    from agents.memory.embedders import local_embedder

    embedder = local_embedder()
    t0 = time.perf_counter()
    embedder.model()
    load = time.perf_counter() - t0
    texts = [
        f"Note {i}: the user mentioned item {i * 7919 % 100_003} during meeting {i % 97}"
        for i in range(50_000)
    ]
    embedder.embed_array(texts[:1000])  # warm
    t0 = time.perf_counter()
    embedder.embed_array(texts)
    elapsed = time.perf_counter() - t0
    print(
        f"embedding: model load {load:.2f} s; {len(texts):,} short texts in {elapsed:.2f} s = "
        f"{len(texts) / elapsed:,.0f} texts/s (target >= 5,000)"
    )


def setup_tenant(slug: str):  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model

    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from claw_platform.tenancy.actions import do_create_tenant

    tenant = do_create_tenant(f"Bench {slug}", slug=slug)
    provider = do_create_provider(
        tenant,
        name="p",
        kind="openai_compatible",
        base_url="http://127.0.0.1:9/v1",
        api_key="sk-bench-0123456789",
    )
    model = do_create_model_profile(provider, model="m", context_window=32_000, max_output_tokens=4096)
    agent = do_create_agent(tenant, slug="assistant", name="A", model=model)
    user = get_user_model().objects.create_user(username=f"{slug}-user", password="x" * 20)
    return tenant, agent, user


@contextmanager
def loading() -> Iterator[None]:
    """The data's setup and load: the owner role, across tenants (the benchmark's own
    tenants, users and rows; the HNSW index it drops and builds)."""
    from claw_platform.db_roles import as_owner
    from claw_platform.tenancy.rls import system_bypass

    # The benchmark's setup writes its own tenants' rows, which no tenant context covers.
    with as_owner(), system_bypass():
        yield


@contextmanager
def as_product(tenant_id: int) -> Iterator[None]:
    """A measured query, as the product runs it: the runtime role (DATABASE_URL,
    claw_app: no superuser, no BYPASSRLS) inside the tenant's context, so that the
    policy claw_tenant applies exactly as on a chat turn."""
    from claw_platform.tenancy.context import tenant_context

    with tenant_context(tenant_id):
        yield


def runtime_role_check() -> str:
    """Who the measured queries run as (refuses to measure as the owner)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, r.rolsuper, r.rolbypassrls, current_setting('claw.tenant_id', true) "
            "FROM pg_roles r WHERE r.rolname = current_user"
        )
        user, superuser, bypass, tenant = cursor.fetchone()
    if superuser or bypass:
        sys.exit(f"scale: the measured queries would run as {user}, which bypasses row-level security")
    return f"as {user} (no superuser, no BYPASSRLS), claw.tenant_id = {tenant}"


def quality() -> None:
    from agents.memory.embedding import embed_memories
    from agents.memory.recall import RecallSettings, recall
    from agents.memory.store import MemoryOwner
    from agents.models import MemoryEntry
    from tests.memory.retrieval_set import memories, questions

    with loading():
        tenant, agent, user = setup_tenant("bench-quality")
        keys = {}
        for key, content in memories():
            entry = MemoryEntry._base_manager.create(
                tenant=tenant, scope="user", user=user, agent=agent, content=content
            )
            keys[key] = entry.pk
        embed_memories()
    owner = MemoryOwner(tenant_id=tenant.pk, agent_id=agent.pk, user_id=user.pk)
    hits = {"keyword": 0, "vector": 0, "hybrid": 0, "hybrid (rrf)": 0}
    qs = questions()
    for question, key in qs:
        target = keys[key]
        for method in ("weighted", "rrf"):
            with as_product(tenant.pk):
                found = recall(owner, question, cfg=RecallSettings(method=method), limit=5)
            by_score = [c.id for c in found.candidates][:5]
            hits["hybrid" if method == "weighted" else "hybrid (rrf)"] += target in by_score
            if method == "weighted":
                by_vector = [c.id for c in sorted(found.candidates, key=lambda c: c.vector_rank or 10**6)][:5]
                by_text = [c.id for c in sorted(found.candidates, key=lambda c: c.keyword_rank or 10**6)][:5]
                hits["vector"] += target in by_vector and any(
                    c.id == target and c.vector_rank for c in found.candidates
                )
                hits["keyword"] += target in by_text and any(
                    c.id == target and c.keyword_rank for c in found.candidates
                )
    n = len(qs)
    print(
        f"recall@5 on {len(keys)} memories, {n} questions: "
        + ", ".join(f"{name} {count / n:.3f}" for name, count in hits.items())
    )


# Words in a large share of every tenant's rows ("note" is in all of them): the
# common-word query set (item 2 of the honest bench).
COMMON_WORDS = (("daily", 0.5), ("weekly", 0.1), ("monthly", 0.02))


def common_words(share: float) -> str:
    return "".join(f" {word}" for word, part in COMMON_WORDS if share < part)


def scale(rows: int, tenants: int, queries: int) -> None:
    import numpy as np
    from django.db import connection
    from pgvector.psycopg import register_vector

    rng = np.random.default_rng(25)
    dim, clusters = 256, 1000
    with loading():
        reused = reuse_scale(tenants, rows)
    if reused is not None:  # --pgdata of an earlier run: measure again, no reload
        made = reused
        centers = rng.standard_normal((clusters, dim)).astype(np.float32)
        words = [f"w{i:05d}" for i in range(20_000)]
        measure(made, centers, words, rng, queries, dim, clusters)
        return
    with loading():
        made = [setup_tenant(f"bench-scale-{t}") for t in range(tenants)]
        tenant_ids = np.array([t.pk for t, _a, _u in made])
        agent_ids = np.array([a.pk for _t, a, _u in made])
        centers = rng.standard_normal((clusters, dim)).astype(np.float32)
        words = [f"w{i:05d}" for i in range(20_000)]
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS memory_embedding_256")
        raw = connection.connection
        register_vector(raw)
        t0 = time.perf_counter()
        batch = 50_000
        with (
            raw.cursor() as cursor,
            cursor.copy(
                "COPY agents_memoryentry (tenant_id, scope, category, agent_id, content, embedding, embedding_dim, "
                "embedder, embed_error, created_at, updated_at) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(
                [
                    "int8",
                    "varchar",
                    "varchar",
                    "int8",
                    "text",
                    "vector",
                    "int2",
                    "varchar",
                    "varchar",
                    "timestamptz",
                    "timestamptz",
                ]
            )
            now = time.time()
            from datetime import UTC, datetime

            stamp = datetime.fromtimestamp(now, UTC)
            for start in range(0, rows, batch):
                n = min(batch, rows - start)
                which = rng.integers(0, clusters, n)
                vecs = centers[which] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                owner = rng.integers(0, tenants, n)  # independent of the cluster
                w = rng.integers(0, len(words), (n, 3))
                share = rng.random(n)  # the common words: in 50 %, 10 % and 2 % of the rows
                for j in range(n):
                    copy.write_row(
                        (
                            int(tenant_ids[owner[j]]),
                            "agent",
                            "core",
                            int(agent_ids[owner[j]]),
                            f"note {words[w[j, 0]]} {words[w[j, 1]]} {words[w[j, 2]]}{common_words(share[j])}",
                            vecs[j],
                            dim,
                            "bench",
                            "",
                            stamp,
                            stamp,
                        )
                    )
        raw.commit()
        load = time.perf_counter() - t0
        print(
            f"scale: {rows:,} rows of {dim} dimensions over {tenants} tenants loaded by COPY in {load:.1f} s"
        )
        with connection.cursor() as cursor:
            # What autovacuum does to a live table after inserts: statistics, and the
            # visibility map that lets the exact scan read the covering index alone.
            cursor.execute("VACUUM (ANALYZE) agents_memoryentry")
            # The whole graph in memory (about 1.5 GB for 1M x 256 dimensions): a build
            # that spills to disk is many times slower.
            cursor.execute("SET maintenance_work_mem = '4GB'")
            cursor.execute("SET max_parallel_maintenance_workers = 2")
            t0 = time.perf_counter()
            cursor.execute(
                "CREATE INDEX memory_embedding_256 ON agents_memoryentry USING hnsw "
                "((embedding::vector(256)) vector_cosine_ops) WHERE embedding_dim = 256"
            )
            build = time.perf_counter() - t0
            cursor.execute("SELECT pg_size_pretty(pg_relation_size('memory_embedding_256'))")
            size = cursor.fetchone()[0]
            cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('agents_memoryentry'))")
            table = cursor.fetchone()[0]
        built = f"HNSW index (m 16, ef_construction 64) built in {build:.1f} s, {size} (table {table})"
        print(f"scale: {built}")
        BUILD_NOTE.write_text(
            json.dumps(
                {
                    "rows": rows,
                    "tenants": tenants,
                    "load_s": round(load, 1),
                    "built": built,
                    "load_average": os.getloadavg()[0],
                    "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                }
            )
        )
    measure(made, centers, words, rng, queries, dim, clusters)


def reuse_scale(tenants: int, rows: int):  # type: ignore[no-untyped-def]
    """The tenants of an earlier run in this data folder, or None. An earlier run that
    did not finish its load and index build stops the benchmark (start again in a new
    folder) rather than measuring a partial table."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from agents.models import Agent
    from claw_platform.tenancy.models import Tenant

    found = []
    for t in range(tenants):
        tenant = Tenant.objects.filter(slug=f"bench-scale-{t}").first()
        if tenant is None:
            return None
        agent = Agent._base_manager.get(tenant=tenant, slug="assistant")
        found.append((tenant, agent, get_user_model().objects.get(username=f"bench-scale-{t}-user")))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM agents_memoryentry WHERE embedder = 'bench'")
        stored = cursor.fetchone()[0]
        cursor.execute("SELECT to_regclass('memory_embedding_256') IS NOT NULL")
        indexed = cursor.fetchone()[0]
    if not BUILD_NOTE.exists() or not indexed:
        sys.exit(
            f"scale: the earlier run in this folder did not finish ({stored:,} rows); use a new --pgdata"
        )
    note = json.loads(BUILD_NOTE.read_text())
    print(
        f"scale: reusing {stored:,} rows of {note['tenants']} tenants and the index of an earlier run "
        f"(--pgdata; --rows ignored): loaded in {note['load_s']} s, {note['built']}, "
        f"at {note['at']}, load average then {note['load_average']:.1f}"
    )
    if stored != rows:
        print(f"scale: note: --rows {rows:,} but the folder holds {stored:,}")
    return found


def measure(made, centers, words, rng, queries, dim, clusters):  # type: ignore[no-untyped-def]
    import numpy as np

    from agents.memory.recall import RecallSettings

    tenant, _agent, _user = made[0]
    qvecs = centers[rng.integers(0, clusters, queries)] + 0.6 * rng.standard_normal((queries, dim)).astype(
        np.float32
    )
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    qtext = [f"{words[i]} {words[i + 1]}" for i in rng.integers(0, len(words) - 1, queries)]
    with as_product(tenant.pk):
        measure_as_product(made, qvecs, qtext, queries, RecallSettings)


def measure_as_product(made, qvecs, qtext, queries, RecallSettings):  # type: ignore[no-untyped-def]
    from django.db import connection

    from agents.memory.recall import recall
    from agents.memory.store import MemoryOwner

    tenant, agent, _user = made[0]
    owner = MemoryOwner(tenant_id=tenant.pk, agent_id=agent.pk, user_id=None)
    print(f"scale: measured queries {runtime_role_check()}; their plans in {PLANS}")
    PLANS.write_text("")
    trips = []
    with connection.cursor() as cursor:
        for _ in range(200):
            t0 = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchone()
            trips.append((time.perf_counter() - t0) * 1000)
    print(
        f"scale: machine floor: SELECT 1 round trip p50 {percentile(trips, 0.5):.2f} ms / "
        f"p95 {percentile(trips, 0.95):.2f} ms, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    # The common-word set: words in every row ("note"), in half, a tenth and 2 % of
    # them, alone and together; and each with a rare word of one of the tenant's own
    # memories, which the keyword half must still rank in its top 3 (the exact-term
    # guarantee with a common word beside it).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, content FROM agents_memoryentry WHERE tenant_id = %s ORDER BY id", [tenant.pk]
        )
        rows = cursor.fetchall()
    # An exact term: a rare word that only one of the tenant's memories holds.
    counts: dict[str, int] = {}
    for _id, content in rows:
        for word in set(content.split()[1:4]):
            counts[word] = counts.get(word, 0) + 1
    own = [
        (row_id, next(w for w in content.split()[1:4] if counts[w] == 1))
        for row_id, content in rows
        if any(counts[w] == 1 for w in content.split()[1:4])
    ][:queries]
    common_sets = ["note", "daily", "weekly", "monthly", "daily note", "weekly daily note", "note monthly"]
    ctext, exact_of = [], []
    for i in range(queries):
        phrase = common_sets[i % len(common_sets)]
        if i % 2:  # half of them carry a rare word of one row
            row_id, rare = own[i % len(own)]
            ctext.append(f"{phrase} {rare}")
            exact_of.append((row_id, rare))
        else:
            ctext.append(phrase)
            exact_of.append(None)
    exact_cfg = RecallSettings(limit=10, exact_scan_rows=10**9, floor=0.0)
    for set_label, texts in (("rare-word queries", qtext), ("common-word queries", ctext)):
        truths = [
            vector_top(recall(owner, t, cfg=exact_cfg, query_vector=v))
            for v, t in zip(qvecs, texts, strict=True)
        ]
        for label, cfg in (
            ("chosen path (exact scan: the tenant holds 1 %)", RecallSettings(limit=10, floor=0.0)),
            # The HNSW index allowed (a tenant above exact_scan_rows): the planner chooses.
            ("index allowed (HNSW + iterative scan)", RecallSettings(limit=10, floor=0.0, exact_scan_rows=0)),
        ):
            times, recalls, full, exact_hits, exact_total = [], [], 0, 0, 0
            for _ in range(2):  # a warm-up pass, then the measured one
                times, recalls, full, exact_hits, exact_total = [], [], 0, 0, 0
                for vec, text, truth, exact in zip(qvecs, texts, truths, exact_of, strict=True):
                    t0 = time.perf_counter()
                    found = recall(owner, text, cfg=cfg, query_vector=vec)
                    times.append((time.perf_counter() - t0) * 1000)
                    got = vector_top(found)
                    recalls.append(len(got & truth) / max(1, len(truth)))
                    full += len(got) >= 10
                    if set_label.startswith("common") and exact is not None:
                        exact_total += 1
                        top3 = sorted(
                            (c for c in found.candidates if c.keyword_rank), key=lambda c: c.keyword_rank
                        )[:3]
                        exact_hits += any(c.id == exact[0] for c in top3)
            extra = (
                f", exact word of a row in the keyword top 3: {exact_hits}/{exact_total}"
                if exact_total
                else ""
            )
            print(
                f"scale, {set_label}, {label}: recall@10 {statistics.mean(recalls):.3f}, "
                f"{full}/{queries} queries with 10 results{extra}, hybrid recall p50 {percentile(times, 0.5):.1f} ms / "
                f"p95 {percentile(times, 0.95):.1f} ms (target >= 0.95 at p95 < 15 ms); "
                f"plan: {plan(owner, cfg, qvecs[1], texts[1], set_label, label)}; "
                f"load average {os.getloadavg()[0]:.1f}"
            )


def vector_top(found) -> set[int]:  # type: ignore[no-untyped-def]
    return {
        c.id for c in sorted(found.candidates, key=lambda c: c.vector_rank or 10**6)[:10] if c.vector_rank
    }


def plan(owner, cfg, vec, text, set_label, label) -> str:  # type: ignore[no-untyped-def]
    """The plan the product's recall statement gets for this owner, text and settings,
    by EXPLAIN (ANALYZE, BUFFERS) as the runtime role in the tenant's context (the
    caller's); the whole plan is written next to the data (plans.txt)."""
    from django.db import connection, transaction

    from agents.memory import recall as r

    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = r.recall_statement(cursor, owner, text, cfg=cfg, vector=vec, dim=256)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        explained = "\n".join(row[0] for row in cursor.fetchall())
    with PLANS.open("a") as out:
        out.write(f"=== {set_label}, {label}: {text!r} ({runtime_role_check()})\n{explained}\n\n")
    if "memory_embedding_256" in explained:
        vector = "HNSW index + iterative scan"
    elif "memory_tenant_vectors_256" in explained:
        vector = "the tenant's vectors from the covering index + sort"
    else:
        vector = "the tenant's rows from the table + sort"
    keyword = (
        "per word claw_memory_term_hits"
        + (" (" + term_plans(owner, text) + ")" if "claw_memory_term_hits" in explained else "")
        if "claw_memory_term_hits" in explained
        else next((name for name in KEYWORD_INDEXES if name in explained), "no index")
    )
    took = next((line.strip() for line in explained.splitlines() if line.startswith("Execution Time")), "")
    return f"vector half {vector}, keyword half {keyword}, {took}"


def term_plans(owner, text) -> str:  # type: ignore[no-untyped-def]
    """What claw_memory_term_hits runs for each word of ``text`` (as its owner, with
    this tenant's values), EXPLAIN (ANALYZE, BUFFERS) into plans.txt; a summary."""
    from django.db import connection

    from agents.memory.recall import query_terms

    summary = []
    with loading(), connection.cursor() as cursor:
        for word in query_terms(text):
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS) SELECT m.id FROM public.agents_memoryentry m "
                "WHERE m.tenant_id = %s::bigint AND m.search_vector @@ to_tsquery('simple', quote_literal(%s)) "
                "AND m.category <> 'archived' AND (m.scope = 'tenant' OR (m.scope = 'agent' AND m.agent_id = %s)) "
                "ORDER BY m.id DESC LIMIT 200",
                [owner.tenant_id, word, owner.agent_id],
            )
            explained = "\n".join(row[0] for row in cursor.fetchall())
            with PLANS.open("a") as out:
                out.write(f"--- inside claw_memory_term_hits for {word!r} (as the owner)\n{explained}\n\n")
            index = (
                "GIN memory_tenant_search"
                if "memory_tenant_search" in explained
                else ("newest rows by memory_tenant_terms" if "memory_tenant_terms" in explained else "other")
            )
            took = next(
                (
                    ln.split(":")[1].strip()
                    for ln in explained.splitlines()
                    if ln.startswith("Execution Time")
                ),
                "",
            )
            summary.append(f"{word}: {index} {took}")
    return "; ".join(summary)


def tune(database) -> None:  # type: ignore[no-untyped-def]
    """Memory for the benchmark's own server (kept in its data folder): the table and
    the HNSW index of 1M rows (about 2.5 GB) stay in shared buffers."""
    import psycopg

    with psycopg.connect(database.owner_url, autocommit=True) as conn:
        row = conn.execute("SHOW shared_buffers").fetchone()
        if row is not None and row[0] == "3GB":
            return
        conn.execute("ALTER SYSTEM SET shared_buffers = '3GB'")
        conn.execute("ALTER SYSTEM SET effective_cache_size = '8GB'")
    database.restart()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument(
        "--pgdata",
        help="keep the data in this folder (an absolute path; default: a new temporary one); "
        "a second run on it measures the stored rows and index again without reloading",
    )
    parser.add_argument(
        "--queries-only",
        action="store_true",
        help="only the query phase on the rows of an earlier --pgdata run (no throughput or quality)",
    )
    args = parser.parse_args()
    if args.queries_only:
        if not args.pgdata:
            parser.error("--queries-only needs --pgdata of an earlier run")
        args.skip_throughput = args.skip_quality = True
    work = Path(args.pgdata or tempfile.mkdtemp(prefix="claw-bench-memory-")).resolve()
    global BUILD_NOTE, PLANS
    BUILD_NOTE = work / "scale-build.json"
    PLANS = work / "plans.txt"
    if args.queries_only and not BUILD_NOTE.exists():
        parser.error(f"--queries-only: no finished earlier run in {work}")
    from claw_platform.embedded_db import start_embedded_database

    database = start_embedded_database(work / "pgdata")
    tune(database)
    try:
        os.environ.update(
            {
                # As the product runs: the runtime role (claw_app, strict row-level
                # security). The owner only loads the data and builds the index
                # (``as_owner()`` around those steps); every measured query is the
                # runtime's, inside the tenant's context.
                "DATABASE_URL": database.url,
                "DATABASE_OWNER_URL": database.owner_url,
                "CLAW_VAR_DIR": str(work / "var"),
                "DJANGO_SETTINGS_MODULE": "claw_platform.settings",
                "LOG_LEVEL": "WARNING",
            }
        )
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        if not args.skip_throughput:
            throughput()
        if not args.skip_quality:
            quality()
        if not args.skip_scale:
            scale(args.rows, args.tenants, args.queries)
    finally:
        database.stop()


if __name__ == "__main__":
    main()
