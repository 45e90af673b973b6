"""Hybrid recall (M2): vector and full-text candidates fused into one ranking.

Each half brings about ``candidate_factor`` x the final limit of candidates from the
memories the owner may see (M7; in a group chat no personal ones, E16):

- vector: cosine similarity of the question's embedding to each memory's, on the
  memory's own dimension. For an owner whose tenant holds few vectors the scan is
  exact (the tenant's rows first, then ORDER BY distance: faster and exact); for a
  large tenant the dimension's HNSW index is used with pgvector's iterative scan
  (``hnsw.iterative_scan``, ``hnsw.max_scan_tuples``) so the tenant filter, applied
  after the index scan, never makes the answer come back short;
- keyword: PostgreSQL full text (``search_vector``), any significant word of the
  question (OR). The ranking is bounded for any word: each word brings at most
  ``keyword_term_rows`` of its newest matches (``claw_memory_term_hits``, migration
  0020: under row-level security ``@@`` cannot be an index condition otherwise), all
  of them for a rare word such as a code or a name, a sample for a word in a large
  share of the rows; only their union is ranked, each matched word weighing by its
  rarity (so an exact term outranks any number of common words), then ``ts_rank``.

Fusion, by default the references' weighted sum: vector 0.7, keyword 0.3, each
normalised to 0..1 (the similarity over the best one found, or over the embedder's
``full_similarity`` when nothing comes that close; the keyword rank min-max over the keyword hits), and a relevance floor of 0.4.
Reciprocal rank fusion (k = 60, normalised so that first in both lists is 1) is the
other method, with a floor of its own. At most ``limit`` memories and
``max_tokens`` tokens are selected, best first.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models.signals import post_delete, post_save

from agents.engine.tokens import estimate_text_tokens
from agents.memory.embedders import Embedder, EmbedderError, embedder_for_tenant
from agents.memory.store import MemoryOwner
from agents.models.memory import INDEXED_DIMENSIONS
from agents.models.providers import LLMProvider, ModelProfile
from claw_platform.prepared import prepared_cursor

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_WORDS = 32
MAX_QUERY_CHARS = 2_000

# Words too common to say anything about which memory is meant ("simple" keeps them).
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "tell",
        "know",
        "remember",
        "please",
        "any",
        "anything",
        "something",
        "did",
        "does",
        "me",
        "us",
        "let",
    ]
)


@dataclass(frozen=True)
class RecallSettings:
    method: str = "weighted"  # or "rrf"
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    floor: float = 0.4
    rrf_k: int = 60
    rrf_floor: float = 0.45
    vector_full: float | None = None  # None: the embedder's own full_similarity
    limit: int = 5
    max_tokens: int = 1_500
    candidate_factor: int = 4
    exact_scan_rows: int = 20_000
    ef_search: int = 100
    max_scan_tuples: int = 40_000
    # The newest matches each query word brings to the keyword ranking (a common
    # word's share of the rows is never ranked whole).
    keyword_term_rows: int = 100

    @classmethod
    def from_settings(cls) -> RecallSettings:
        return cls(
            method=settings.CLAW_MEMORY_RECALL_METHOD,
            floor=settings.CLAW_MEMORY_RECALL_FLOOR,
            rrf_floor=settings.CLAW_MEMORY_RRF_FLOOR,
            limit=settings.CLAW_MEMORY_RECALL_LIMIT,
            max_tokens=settings.CLAW_MEMORY_RECALL_TOKENS,
            exact_scan_rows=settings.CLAW_MEMORY_EXACT_SCAN_ROWS,
        )


@dataclass
class Candidate:
    id: int
    scope: str
    category: str
    content: str
    updated_at: datetime
    vector: float | None = None  # cosine similarity
    keyword: float | None = None  # ts_rank
    vector_rank: int | None = None
    keyword_rank: int | None = None
    has_vector: bool = True  # False: not embedded (yet) by this embedder
    score: float = 0.0
    tokens: int = 0
    selected: bool = False

    def log(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "vector": None if self.vector is None else round(self.vector, 4),
            "keyword": None if self.keyword is None else round(self.keyword, 4),
            "score": round(self.score, 4),
            "tokens": self.tokens,
            "selected": self.selected,
        }


@dataclass
class Recall:
    query: str
    method: str
    candidates: list[Candidate] = field(default_factory=list)
    embed_error: str = ""

    @property
    def selected(self) -> list[Candidate]:
        return [c for c in self.candidates if c.selected]

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.selected)


def query_terms(query: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(query or "")]
    significant = [w for w in words if w not in STOPWORDS]
    return list(dict.fromkeys(significant or words))[:MAX_QUERY_WORDS]


def _visible_sql(owner: MemoryOwner, *, personal: bool, scopes: list[str] | None) -> tuple[str, list[Any]]:
    """The owner's visible, unarchived memories (M7), as SQL over agents_memoryentry."""
    clauses = ["scope = 'tenant'"]
    params: list[Any] = [owner.tenant_id]
    if owner.agent_id is not None:
        clauses.append("(scope = 'agent' AND agent_id = %s)")
        params.append(owner.agent_id)
    if personal and owner.user_id is not None:
        clauses.append("(scope = 'user' AND user_id = %s)")
        params.append(owner.user_id)
    # "::bigint": btree_gin's int8 class has no int8 = int4 operator; with a plain
    # integer the GIN index on (tenant, search_vector) is searched by the words alone
    # (every tenant's matches: 1,000,000 rows for a word they all use).
    sql = f"tenant_id = %s::bigint AND category <> 'archived' AND ({' OR '.join(clauses)})"
    if scopes:
        sql += " AND scope = ANY(%s)"
        params.append(list(scopes))
    return sql, params


def vector_literal(vector: Any) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


# Per process: whether a tenant holds more rows than ``exact_scan_rows`` (the choice of
# the exact or the HNSW path: a tenant grows slowly, and either path gives a full
# answer) and the tenant's embedder (dropped when a model profile or provider
# changes here; another process sees a change within the TTL).
_SIZE_TTL = 300.0
_EMBEDDER_TTL = 30.0
_tenant_large: dict[tuple[int, int], tuple[bool, float]] = {}
_embedders: dict[int, tuple[Embedder, float]] = {}
# The HNSW scan settings made on a connection for its whole session (set once, not
# per query), as (ef_search, max_scan_tuples); kept on the psycopg connection.
_HNSW_ATTR = "_claw_hnsw_settings"


def forget_cached(*_args: Any, **_kwargs: Any) -> None:
    """Drop the per-process caches (an embedder changed; tests)."""
    _tenant_large.clear()
    _embedders.clear()


for _model in (ModelProfile, LLMProvider):
    post_save.connect(forget_cached, sender=_model, dispatch_uid=f"recall-forget-{_model.__name__}")
    post_delete.connect(forget_cached, sender=_model, dispatch_uid=f"recall-forget-del-{_model.__name__}")


def tenant_embedder(tenant_id: int) -> Embedder:
    """``embedder_for_tenant``, cached for ``_EMBEDDER_TTL`` seconds: the lookup is
    a query of its own on every turn otherwise."""
    now = time.monotonic()
    hit = _embedders.get(tenant_id)
    if hit is not None and hit[1] > now:
        return hit[0]
    embedder = embedder_for_tenant(tenant_id)
    _embedders[tenant_id] = (embedder, now + _EMBEDDER_TTL)
    return embedder


def _is_large(cursor: Any, tenant_id: int, threshold: int) -> bool:
    """More than ``threshold`` memories in the tenant (counted up to threshold + 1)."""
    now = time.monotonic()
    key = (tenant_id, threshold)
    hit = _tenant_large.get(key)
    if hit is not None and hit[1] > now:
        return hit[0]
    cursor.execute(
        "SELECT count(*) FROM (SELECT 1 FROM agents_memoryentry WHERE tenant_id = %s LIMIT %s) s",
        [tenant_id, threshold + 1],
    )
    large = bool(cursor.fetchone()[0] > threshold)
    _tenant_large[key] = (large, now + _SIZE_TTL)
    return large


def _hnsw_settings(cursor: Any, ef_search: int, max_scan_tuples: int) -> None:
    """pgvector's iterative scan for the tenant-filtered HNSW query (the filter is
    applied after the index scan: without it a small tenant's answer comes back
    short). Set for the connection's session once (the only HNSW scans are these),
    or for the transaction when recall runs inside one (a rollback would undo a
    session setting unseen)."""
    wanted = (ef_search, max_scan_tuples)
    raw = connection.connection
    in_transaction = connection.in_atomic_block
    if not in_transaction and getattr(raw, _HNSW_ATTR, None) == wanted:
        return
    local = "true" if in_transaction else "false"
    cursor.execute(
        f"SELECT set_config('hnsw.iterative_scan', 'relaxed_order', {local}), "
        f"set_config('hnsw.ef_search', %s, {local}), set_config('hnsw.max_scan_tuples', %s, {local})",
        [str(ef_search), str(max_scan_tuples)],
    )
    if in_transaction:
        if raw is not None and hasattr(raw, _HNSW_ATTR):
            delattr(raw, _HNSW_ATTR)  # the transaction's end restores the session's values
    else:
        setattr(raw, _HNSW_ATTR, wanted)


def _recall_sql(where: str, *, dim: int | None, exact: bool) -> str:
    """One statement for both halves and the candidates' rows (one round trip).

    Parameters, in order: [vector half: the query vector, the dimension, the where
    parameters, n], the question, the stopwords, the word limit, the owner for
    ``claw_memory_term_hits`` (tenant, agent, user or None, scopes or None), the rows
    per word, the where parameters, the rows per word again, n, [the query vector
    for every candidate's similarity].
    Rows: id, scope, category, content, updated_at, has_vector, similarity,
    vector rank, ts_rank, keyword rank."""
    keyword = (
        "terms AS MATERIALIZED (SELECT lexeme, to_tsquery('simple', quote_literal(lexeme)) AS tq "  # noqa: S608 (where: ours)
        "  FROM unnest(to_tsvector('simple', %s)) WHERE NOT lexeme = ANY(%s) LIMIT %s), "
        "query AS (SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q FROM terms), "
        # Each word's newest matches, at most k (migration 0020: an index condition
        # under row-level security): a rare word (a code) brings all of them, a
        # common one stops after k, never a ts_rank over its whole share.
        "hits AS MATERIALIZED (SELECT t.lexeme, h.id FROM terms t, "
        "  LATERAL claw_memory_term_hits(%s, %s, %s, %s, t.tq, %s) h), "
        "df AS (SELECT lexeme, count(*) AS n FROM hits GROUP BY lexeme), "
        # Under the policy again, and the owner's visibility (the ids are the tenant's).
        "cand AS (SELECT m.id, m.search_vector AS sv FROM agents_memoryentry m "
        f"  WHERE m.id IN (SELECT id FROM hits) AND {where}), "
        # Frequency-aware: each matched word weighs ln(1 + (k + 1) / its matches), so a
        # word with a handful of matches outweighs any number of common ones; ts_rank
        # (how often the words occur) orders rows that match the same words.
        "kw AS MATERIALIZED (SELECT c.id, sum(ln(1 + (%s + 1)::float8 / df.n)) + ts_rank(c.sv, query.q) AS r "
        "  FROM cand c JOIN terms t ON c.sv @@ t.tq JOIN df ON df.lexeme = t.lexeme, query "
        "  GROUP BY c.id, c.sv, query.q ORDER BY 2 DESC, 1 DESC LIMIT %s), "
        "khits AS (SELECT id, r, row_number() OVER (ORDER BY r DESC, id DESC) AS rank FROM kw)"
    )
    if dim is None:  # no query vector: the text half alone
        return (
            f"WITH {keyword} "  # noqa: S608 (where: ours)
            # No query vector: every hit is scored by text alone (has_vector false).
            "SELECT m.id, m.scope, m.category, m.content, m.updated_at, false, "
            "NULL::float8, NULL::bigint, k.r, k.rank FROM khits k JOIN agents_memoryentry m ON m.id = k.id"
        )
    dim = int(dim)
    distance = f"(embedding::vector({dim}) <=> %s::vector({dim}))"
    # Exact: the tenant's rows by their index, each distance computed once (OFFSET 0
    # keeps the subquery apart, so the planner cannot take the HNSW index for the
    # ORDER BY, which would filter after the scan). HNSW: relaxed_order may return
    # slightly out of order; the rank re-sorts the materialised hits.
    rows = f"SELECT id, {distance} AS d FROM agents_memoryentry WHERE embedding_dim = %s AND {where}"  # noqa: S608
    vec = f"SELECT id, d FROM ({rows} OFFSET 0) r" if exact else rows  # noqa: S608 (dim an int, where ours)
    return (
        f"WITH vec AS MATERIALIZED ({vec} ORDER BY d LIMIT %s), "  # noqa: S608 (dim an int, where ours)
        "vhits AS (SELECT id, 1 - d AS s, row_number() OVER (ORDER BY d, id) AS rank FROM vec), "
        f"{keyword}, "
        "ids AS (SELECT id FROM vhits UNION SELECT id FROM khits) "
        f"SELECT m.id, m.scope, m.category, m.content, m.updated_at, m.embedding_dim = {dim} IS TRUE, "
        # A keyword hit outside the vector candidates still has its similarity.
        f"coalesce(v.s, CASE WHEN m.embedding_dim = {dim} "
        f"  THEN 1 - (m.embedding::vector({dim}) <=> %s::vector({dim})) END), "
        "v.rank, k.r, k.rank "
        "FROM ids JOIN agents_memoryentry m ON m.id = ids.id "
        "LEFT JOIN vhits v ON v.id = m.id LEFT JOIN khits k ON k.id = m.id"
    )


def recall_statement(
    cursor: Any,
    owner: MemoryOwner,
    query: str,
    *,
    cfg: RecallSettings,
    vector: Any,
    dim: int,
    limit: int | None = None,
    personal: bool = True,
    scopes: list[str] | None = None,
) -> tuple[str, list[Any]]:
    """The recall statement and its parameters for ``owner`` (with the HNSW scan
    settings made on ``cursor`` when the index path is chosen); ``vector`` None: the
    text half alone. The benchmark EXPLAINs the same statement."""
    n = (limit or cfg.limit) * cfg.candidate_factor
    where, params = _visible_sql(owner, personal=personal, scopes=scopes)
    terms = query_terms(query)
    skip = list(STOPWORDS) if terms and set(terms) - STOPWORDS else []
    k = cfg.keyword_term_rows
    user = owner.user_id if personal else None
    term_owner = [owner.tenant_id, owner.agent_id, user, list(scopes) if scopes else None]
    keyword_params = [query, skip, MAX_QUERY_WORDS, *term_owner, k, *params, k, n]
    if vector is None:
        return _recall_sql(where, dim=None, exact=True), keyword_params
    q = vector_literal(vector)
    exact = dim not in INDEXED_DIMENSIONS or not _is_large(cursor, owner.tenant_id, cfg.exact_scan_rows)
    if not exact:
        _hnsw_settings(cursor, max(cfg.ef_search, n), cfg.max_scan_tuples)
    return _recall_sql(where, dim=dim, exact=exact), [q, dim, *params, n, *keyword_params, q]


def fuse(candidates: list[Candidate], cfg: RecallSettings, full_similarity: float = 0.3) -> None:
    """Score each candidate (in place) by the configured fusion."""
    if cfg.method == "rrf":
        best = 2.0 / (cfg.rrf_k + 1)
        for c in candidates:
            raw = sum(
                1.0 / (cfg.rrf_k + rank) for rank in (c.vector_rank, c.keyword_rank) if rank is not None
            )
            c.score = raw / best
        return
    # Keyword ranks min-max over the keyword hits: the hit that matches the most
    # (an exact code) stands out from those that share only a common word.
    ranks = [c.keyword for c in candidates if c.keyword is not None]
    low, top_keyword = (min(ranks), max(ranks)) if ranks else (0.0, 0.0)
    spread = top_keyword - low
    # Divided by the best similarity found, or the embedder's full match if that is
    # higher: 0..1 without ties at the top, and a weak best match stays weak.
    top_vector = max([cfg.vector_full or full_similarity, *(c.vector or 0.0 for c in candidates)])
    for c in candidates:
        vec = max(c.vector or 0.0, 0.0) / top_vector
        kw = 0.0 if c.keyword is None else ((c.keyword - low) / spread if spread > 0 else 1.0)
        # A memory without a vector (not embedded yet, embedder down) is found by text alone.
        c.score = cfg.vector_weight * vec + cfg.keyword_weight * kw if c.has_vector else kw


def recall(
    owner: MemoryOwner,
    query: str,
    *,
    personal: bool = True,
    scopes: list[str] | None = None,
    cfg: RecallSettings | None = None,
    limit: int | None = None,
    query_vector: Any = None,
) -> Recall:
    """The memories most relevant to ``query`` that ``owner`` may see, scored; those
    within the limits are marked ``selected``. ``personal=False`` (a group chat)
    leaves user-scope memories out. ``query_vector``: the query's embedding when the
    caller has it already (the benchmark's synthetic vectors)."""
    cfg = cfg or RecallSettings.from_settings()
    limit = limit or cfg.limit
    query = (query or "").strip()[:MAX_QUERY_CHARS]
    result = Recall(query=query, method=cfg.method)
    if not query:
        return result
    embedder = tenant_embedder(owner.tenant_id)
    vector = query_vector
    if vector is None:
        try:
            vector = embedder.embed([query])[0]
        except EmbedderError as exc:
            result.embed_error = str(exc)  # recall goes on by text alone
    # Prepared (parsed and planned once per connection): planning the statement cost
    # about 1.5 ms of a 12 ms recall at 1,000,000 rows (bench/memory/run.py).
    with prepared_cursor() as cursor:
        sql, sql_params = recall_statement(
            cursor,
            owner,
            query,
            cfg=cfg,
            vector=vector,
            dim=int(embedder.dimension),
            limit=limit,
            personal=personal,
            scopes=scopes,
        )
        cursor.execute(sql, sql_params)
        rows = cursor.fetchall()
    by_id: dict[int, Candidate] = {}
    for row in rows:
        by_id[row[0]] = Candidate(
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            has_vector=bool(row[5]),
            vector=None if row[6] is None else float(row[6]),
            vector_rank=row[7],
            keyword=None if row[8] is None else float(row[8]),
            keyword_rank=row[9],
        )
    candidates = list(by_id.values())
    fuse(candidates, cfg, embedder.full_similarity)
    candidates.sort(key=lambda c: (-c.score, -c.id))
    floor = cfg.rrf_floor if cfg.method == "rrf" else cfg.floor
    budget = cfg.max_tokens
    chosen = 0
    for c in candidates:
        c.tokens = estimate_text_tokens(c.content)
        if chosen < limit and c.score >= floor and c.tokens <= budget:
            c.selected = True
            budget -= c.tokens
            chosen += 1
    result.candidates = candidates
    return result
