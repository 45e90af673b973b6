"""Claiming runs: one worker at a time per run, within the session's single slot and
the per-tenant and global limits (R1, R4, S6).

A claim is one short transaction under an advisory lock, so two workers never count
the same free slot; a burst of new runs is claimed in one transaction (the
dispatcher's, ``agents.runtime.dispatch``; the task queue claims one at a time).

Several workers share a burst by their free room: a dispatcher's claim takes its
share (:func:`claim_share_on`), and the workers it shares with are the others whose
dispatcher is listening to the same database now (its LISTEN connection's
``application_name``, :func:`dispatcher_application_name`: no table to keep, and a
dead worker's connection is gone with it). Without it the first worker to hear of a
burst took all of it, up to its own limit, while the others idled.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import transaction

from claw_platform.prepared import GENERIC_PLANS, prepared_cursor
from claw_platform.tenancy.rls import system_bypass

# Claims are serialised by this advisory lock so the limit counts cannot race; a
# claim is one short transaction, so the lock is held for a millisecond or two.
_CLAIM_LOCK_KEY = 0x636C6177  # "claw"


@dataclass(frozen=True)
class Claim:
    run_id: int
    tenant_id: int
    session_id: Any
    turn_id: int
    attempt: int
    event_seq: int
    resume: bool


# One statement claims a batch: which of the runs are claimable (oldest first, one per
# session, within the limits, counting the ones claimed earlier in the batch), how
# many of them are this worker's share, the claim itself, whether each run resumes
# (its turn already has messages), and the checkpoint fix. A candidate is locked
# (SKIP LOCKED: another worker's claim of it is under way) before it is counted.
#
# The share (with a ``tag``; without one, all up to ``limit``): the batch is split in
# proportion to the workers' free room as it was before the batch, whichever worker
# claims first. So the batch's runs other workers claimed already (``taken``) count
# back, both in the batch and in their room: with two idle workers of 50, a batch of
# 30 is 15 each in either order. The last row is not a claim: it says how many
# claimable runs were left to the other workers.
_CLAIM_SQL = """
WITH cand AS (
    SELECT r.id, r.tenant_id FROM agents_run r
    WHERE r.id = ANY(%(runs)s) AND NOT r.cancel_requested
      AND (r.status = 'queued' OR (r.status = 'running' AND r.lease_expires_at < now()))
      AND NOT EXISTS (
          SELECT 1 FROM agents_run o
          WHERE o.session_id = r.session_id AND o.id <> r.id
            AND (o.status = 'running' OR (o.status = 'queued' AND o.id < r.id)))
    ORDER BY r.id
    FOR UPDATE OF r SKIP LOCKED
), busy AS (
    -- Running runs, but the candidates (one whose lease expired is running still).
    SELECT b.tenant_id FROM agents_run b
    WHERE b.status = 'running' AND b.id NOT IN (SELECT id FROM cand)
), ranked AS (
    SELECT c.id,
        row_number() OVER (PARTITION BY c.tenant_id ORDER BY c.id)
            + (SELECT count(*) FROM busy WHERE busy.tenant_id = c.tenant_id) AS tenant_load,
        row_number() OVER (ORDER BY c.id) + (SELECT count(*) FROM busy) AS load
    FROM cand c
), eligible AS (
    SELECT id FROM ranked WHERE tenant_load <= %(per_tenant)s AND load <= %(global)s
), peers AS (
    SELECT DISTINCT split_part(application_name, ' ', 3) AS tag,
        split_part(application_name, ' ', 2)::int AS capacity
    FROM pg_stat_activity
    WHERE %(tag)s::text IS NOT NULL AND datname = current_database()
      AND application_name ~ '^claw-dispatch [0-9]{1,6} [0-9a-f]{12}$'
      AND split_part(application_name, ' ', 3) <> %(tag)s::text
), peer_load AS (
    SELECT left(md5(w.lease_owner), 12) AS tag, count(*) AS n FROM agents_run w
    WHERE w.status = 'running' AND EXISTS (SELECT 1 FROM peers)
    GROUP BY 1
), peer_room AS (
    SELECT coalesce(sum(greatest(p.capacity - coalesce(l.n, 0), 0)), 0) AS room
    FROM peers p LEFT JOIN peer_load l ON l.tag = p.tag
), taken AS (
    SELECT count(*) AS n FROM agents_run t
    WHERE t.id = ANY(%(runs)s) AND t.status = 'running' AND t.lease_owner <> %(owner)s
      AND t.lease_expires_at >= now()
), share AS (
    SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM peers) THEN %(limit)s
        ELSE least(%(limit)s, ceil(((SELECT count(*) FROM eligible) + t.n) * %(limit)s::numeric
                                   / (%(limit)s + t.n + r.room))::int)
        END AS n
    FROM taken t, peer_room r
), chosen AS (
    SELECT id FROM eligible ORDER BY id LIMIT (SELECT n FROM share)
), claimed AS (
    UPDATE agents_run r SET status = 'running', attempt = r.attempt + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
        started_at = coalesce(r.started_at, now())
    FROM chosen WHERE r.id = chosen.id
    RETURNING r.id, r.tenant_id, r.session_id, r.turn_id, r.attempt, r.event_seq,
        EXISTS (SELECT 1 FROM agents_message m WHERE m.turn_id = r.turn_id) AS resume
), fixed AS (
    -- A run queued behind another opened its turn (and undo checkpoint) when the
    -- message arrived; unless it resumes, its checkpoint must point after the
    -- messages of the earlier run.
    UPDATE agents_checkpoint c SET message_seq = t.last_seq
    FROM claimed cl JOIN agents_turn tu ON tu.id = cl.turn_id JOIN agents_thread t ON t.id = tu.thread_id
    WHERE NOT cl.resume AND c.thread_id = tu.thread_id AND c.number = tu.number
)
SELECT id, tenant_id, session_id, turn_id, attempt, event_seq, resume FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM eligible) - (SELECT count(*) FROM chosen), NULL
ORDER BY id NULLS LAST
"""


# The claim lock, and the claim's plan made once per connection (prepared, generic):
# planning it took PostgreSQL about 1 ms per claim, under the lock.
_LOCK_SQL = f"SELECT pg_advisory_xact_lock(%s), {GENERIC_PLANS}"


def claim_params(owner: str, *, share: bool = False) -> dict[str, Any]:
    """The parameters of ``_CLAIM_SQL`` but the runs and the limit; with ``share``,
    its claims take this worker's share of the batch (the dispatcher's)."""
    return {
        "owner": owner[:200],
        "lease": float(settings.CLAW_RUN_LEASE_SECONDS),
        "per_tenant": settings.CLAW_RUNS_PER_TENANT,
        "global": settings.CLAW_RUNS_GLOBAL,
        "tag": dispatcher_tag(owner) if share else None,
    }


def dispatcher_tag(owner: str) -> str:
    """A short name for ``owner`` that its runs' ``lease_owner`` gives in SQL too
    (``left(md5(lease_owner), 12)``)."""
    return hashlib.md5(owner[:200].encode(), usedforsecurity=False).hexdigest()[:12]


def dispatcher_application_name(owner: str, capacity: int) -> str:
    """The ``application_name`` of ``owner``'s dispatcher connection: how the other
    workers' claims know it is there, and how many runs it holds at most."""
    return f"claw-dispatch {min(capacity, 999_999)} {dispatcher_tag(owner)}"


def claim_run(run_id: int, owner: str) -> Claim | None:
    """Take the run for ``owner`` if it is claimable now; ``None`` otherwise (another
    worker has it, its session is busy, a limit is reached, or it is finished)."""
    claims = claim_runs([run_id], owner, limit=1)
    return claims[0] if claims else None


def claim_runs(run_ids: list[int], owner: str, *, limit: int) -> list[Claim]:
    """:func:`claim_run` for several runs, oldest first, at most ``limit``, in one
    transaction on Django's connection."""
    # Run claims cross tenants by design: any queued run of any tenant.
    with system_bypass(), transaction.atomic(), prepared_cursor() as cursor:
        cursor.execute(_LOCK_SQL, [_CLAIM_LOCK_KEY])
        cursor.execute(_CLAIM_SQL, {**claim_params(owner), "runs": sorted(set(run_ids)), "limit": limit})
        return _claims(cursor.fetchall())[0]


async def claim_runs_on(
    conn: psycopg.AsyncConnection[Any], run_ids: list[int], params: dict[str, Any], *, limit: int
) -> list[Claim]:
    """Claim whichever of ``run_ids`` are claimable, oldest first, at most ``limit``,
    in one transaction on ``conn`` (an autocommit connection of the caller's): a
    burst of runs costs one short lock and one statement, not one per run."""
    return (await claim_share_on(conn, run_ids, params, limit=limit))[0]


async def claim_share_on(
    conn: psycopg.AsyncConnection[Any], run_ids: list[int], params: dict[str, Any], *, limit: int
) -> tuple[list[Claim], int]:
    """:func:`claim_runs_on`, and how many claimable runs were left to the other
    workers (their share, when ``params`` has this worker's tag)."""
    async with conn.transaction():
        await conn.execute(_LOCK_SQL, [_CLAIM_LOCK_KEY], prepare=True)
        cursor = await conn.execute(
            _CLAIM_SQL, {**params, "runs": sorted(set(run_ids)), "limit": limit}, prepare=True
        )
        return _claims(await cursor.fetchall())


def _claims(rows: list[Any]) -> tuple[list[Claim], int]:
    """The claims, and the count the statement's last row (no claim) carries in its
    ``event_seq`` column: the claimable runs left to the other workers."""
    *claims, last = rows
    return [Claim(*row) for row in claims], int(last[5])


# Queued runs and runs whose lease expired, oldest first: what a worker that just
# (re)connected to the database looks at before it listens for new ones.
CLAIMABLE_SQL = """
SELECT id FROM agents_run
WHERE (status = 'queued' OR (status = 'running' AND lease_expires_at < now())) AND NOT cancel_requested
ORDER BY id LIMIT %(limit)s
"""
