"""Claiming runs: one worker at a time per run, within the session's single slot and
the per-tenant and global limits (R1, R4, S6).

A claim is one short transaction under an advisory lock, so two workers never count
the same free slot; a burst of new runs is claimed in one transaction (the
dispatcher's, ``agents.runtime.dispatch``; the task queue claims one at a time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import transaction

from claw_platform.prepared import GENERIC_PLANS, prepared_cursor

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
# session, within the limits, counting the ones claimed earlier in the batch), the
# claim itself, whether each run resumes (its turn already has messages), and the
# checkpoint fix. A candidate is locked (SKIP LOCKED: another worker's claim of it is
# under way) before it is counted.
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
), chosen AS (
    SELECT id FROM ranked
    WHERE tenant_load <= %(per_tenant)s AND load <= %(global)s
    ORDER BY id LIMIT %(limit)s
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
SELECT id, tenant_id, session_id, turn_id, attempt, event_seq, resume FROM claimed ORDER BY id
"""


# The claim lock, and the claim's plan made once per connection (prepared, generic):
# planning it took PostgreSQL about 1 ms per claim, under the lock.
_LOCK_SQL = f"SELECT pg_advisory_xact_lock(%s), {GENERIC_PLANS}"


def claim_params(owner: str) -> dict[str, Any]:
    """The parameters of ``_CLAIM_SQL`` but the runs and the limit."""
    return {
        "owner": owner[:200],
        "lease": float(settings.CLAW_RUN_LEASE_SECONDS),
        "per_tenant": settings.CLAW_RUNS_PER_TENANT,
        "global": settings.CLAW_RUNS_GLOBAL,
    }


def claim_run(run_id: int, owner: str) -> Claim | None:
    """Take the run for ``owner`` if it is claimable now; ``None`` otherwise (another
    worker has it, its session is busy, a limit is reached, or it is finished)."""
    claims = claim_runs([run_id], owner, limit=1)
    return claims[0] if claims else None


def claim_runs(run_ids: list[int], owner: str, *, limit: int) -> list[Claim]:
    """:func:`claim_run` for several runs, oldest first, at most ``limit``, in one
    transaction on Django's connection."""
    with transaction.atomic(), prepared_cursor() as cursor:
        cursor.execute(_LOCK_SQL, [_CLAIM_LOCK_KEY])
        cursor.execute(_CLAIM_SQL, {**claim_params(owner), "runs": sorted(set(run_ids)), "limit": limit})
        return [Claim(*row) for row in cursor.fetchall()]


async def claim_runs_on(
    conn: psycopg.AsyncConnection[Any], run_ids: list[int], params: dict[str, Any], *, limit: int
) -> list[Claim]:
    """Claim whichever of ``run_ids`` are claimable, oldest first, at most ``limit``,
    in one transaction on ``conn`` (an autocommit connection of the caller's): a
    burst of runs costs one short lock and one statement, not one per run."""
    async with conn.transaction():
        await conn.execute(_LOCK_SQL, [_CLAIM_LOCK_KEY], prepare=True)
        cursor = await conn.execute(
            _CLAIM_SQL, {**params, "runs": sorted(set(run_ids)), "limit": limit}, prepare=True
        )
        return [Claim(*row) for row in await cursor.fetchall()]


# Queued runs and runs whose lease expired, oldest first: what a worker that just
# (re)connected to the database looks at before it listens for new ones.
CLAIMABLE_SQL = """
SELECT id FROM agents_run
WHERE (status = 'queued' OR (status = 'running' AND lease_expires_at < now())) AND NOT cancel_requested
ORDER BY id LIMIT %(limit)s
"""
