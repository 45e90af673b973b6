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
  question (OR), ranked by ``ts_rank``.

Fusion, by default the references' weighted sum: vector 0.7, keyword 0.3, each
normalised to 0..1 (the similarity over the best one found, or over the embedder's
``full_similarity`` when nothing comes that close; the keyword rank min-max over the keyword hits), and a relevance floor of 0.4.
Reciprocal rank fusion (k = 60, normalised so that first in both lists is 1) is the
other method, with a floor of its own. At most ``limit`` memories and
``max_tokens`` tokens are selected, best first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents.engine.tokens import estimate_text_tokens
from agents.memory.embedders import EmbedderError, embedder_for_tenant
from agents.memory.store import MemoryOwner
from agents.models.memory import INDEXED_DIMENSIONS

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
    sql = f"tenant_id = %s AND category <> 'archived' AND ({' OR '.join(clauses)})"
    if scopes:
        sql += " AND scope = ANY(%s)"
        params.append(list(scopes))
    return sql, params


def vector_literal(vector: Any) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def _vector_candidates(
    cursor: Any,
    where: str,
    params: list[Any],
    tenant_id: int,
    vector: Any,
    dim: int,
    n: int,
    cfg: RecallSettings,
) -> list[tuple[int, float]]:
    q = vector_literal(vector)
    dim = int(dim)
    distance = f"(embedding::vector({dim}) <=> %s::vector({dim}))"
    cursor.execute(
        "SELECT count(*) FROM (SELECT 1 FROM agents_memoryentry WHERE tenant_id = %s LIMIT %s) s",
        [tenant_id, cfg.exact_scan_rows + 1],
    )
    small = cursor.fetchone()[0] <= cfg.exact_scan_rows
    if small or dim not in INDEXED_DIMENSIONS:
        # Exact: the tenant's rows by its index, then every distance ("+ 0" keeps the
        # planner off the HNSW index, which would filter after the scan).
        cursor.execute(
            f"SELECT id, 1 - {distance} FROM agents_memoryentry "  # noqa: S608 (dim an int, where ours)
            f"WHERE embedding_dim = %s AND {where} ORDER BY {distance} + 0 LIMIT %s",
            [q, dim, *params, q, n],
        )
        return [(row[0], float(row[1])) for row in cursor.fetchall()]
    cursor.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
    cursor.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(max(cfg.ef_search, n))])
    cursor.execute("SELECT set_config('hnsw.max_scan_tuples', %s, true)", [str(cfg.max_scan_tuples)])
    # relaxed_order may return slightly out of order: re-sort the materialised result.
    cursor.execute(
        f"WITH hits AS MATERIALIZED (SELECT id, {distance} AS d FROM agents_memoryentry "  # noqa: S608
        f"WHERE embedding_dim = %s AND {where} ORDER BY {distance} LIMIT %s) "
        "SELECT id, 1 - d FROM hits ORDER BY d",
        [q, dim, *params, q, n],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _keyword_candidates(
    cursor: Any, where: str, params: list[Any], query: str, n: int
) -> list[tuple[int, float]]:
    """The question's own lexemes (PostgreSQL's parser, as for the memories: a code
    such as ``LK-4000-A`` gives the same lexemes on both sides), less the stopwords
    unless nothing else is left, any of them matching (OR)."""
    skip = list(STOPWORDS) if query_terms(query) and set(query_terms(query)) - STOPWORDS else []
    cursor.execute(
        "WITH terms AS (SELECT lexeme FROM unnest(to_tsvector('simple', %s)) "  # noqa: S608 (where: ours)
        "  WHERE NOT lexeme = ANY(%s) LIMIT %s), "
        "query AS (SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS q FROM terms) "
        "SELECT id, ts_rank(search_vector, query.q) FROM agents_memoryentry, query "
        f"WHERE query.q IS NOT NULL AND search_vector @@ query.q AND {where} ORDER BY 2 DESC, id DESC LIMIT %s",
        [query, skip, MAX_QUERY_WORDS, *params, n],
    )
    return [(row[0], float(row[1])) for row in cursor.fetchall()]


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
    n = limit * cfg.candidate_factor
    where, params = _visible_sql(owner, personal=personal, scopes=scopes)
    embedder = embedder_for_tenant(owner.tenant_id)
    vector = query_vector
    if vector is None:
        try:
            vector = embedder.embed([query])[0]
        except EmbedderError as exc:
            result.embed_error = str(exc)  # recall goes on by text alone
    with transaction.atomic(), connection.cursor() as cursor:
        vector_hits = (
            _vector_candidates(cursor, where, params, owner.tenant_id, vector, embedder.dimension, n, cfg)
            if vector is not None
            else []
        )
        keyword_hits = _keyword_candidates(cursor, where, params, query, n)
        ids = list(dict.fromkeys([i for i, _ in vector_hits] + [i for i, _ in keyword_hits]))
        rows: dict[int, tuple[Any, ...]] = {}
        if ids:
            # A keyword hit outside the vector candidates still has its similarity.
            dim = int(embedder.dimension) if vector is not None else -1
            similarity_sql = (
                f"CASE WHEN embedding_dim = {dim} THEN 1 - (embedding::vector({dim}) <=> %s::vector({dim})) END"
                if vector is not None
                else "%s::float8"
            )
            cursor.execute(
                f"SELECT id, scope, category, content, updated_at, embedding_dim = {dim} IS TRUE, {similarity_sql} "  # noqa: S608
                "FROM agents_memoryentry WHERE id = ANY(%s)",
                [vector_literal(vector) if vector is not None else None, ids],
            )
            rows = {row[0]: row for row in cursor.fetchall()}
    by_id: dict[int, Candidate] = {}
    for rank, (entry_id, similarity) in enumerate(vector_hits, start=1):
        row = rows[entry_id]
        by_id[entry_id] = Candidate(
            entry_id, row[1], row[2], row[3], row[4], vector=similarity, vector_rank=rank, has_vector=row[5]
        )
    for rank, (entry_id, ts_rank) in enumerate(keyword_hits, start=1):
        candidate = by_id.get(entry_id)
        if candidate is None:
            row = rows[entry_id]
            candidate = by_id[entry_id] = Candidate(
                entry_id,
                row[1],
                row[2],
                row[3],
                row[4],
                has_vector=row[5],
                vector=None if row[6] is None else float(row[6]),
            )
        candidate.keyword, candidate.keyword_rank = ts_rank, rank
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
