"""Claiming runs: one worker at a time per run, within the session's single slot and
the per-tenant and global limits (R1, R4, S6).

A claim is one short transaction under an advisory lock, so two workers never count
the same free slot; a burst of new runs is claimed in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Run, RunStatus

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


# One statement per claim: the claim, whether the run resumes (its turn already has
# messages), and the checkpoint fix.
_CLAIM_SQL = """
WITH cand AS (
    SELECT r.id FROM agents_run r
    WHERE r.id = %(run)s AND NOT r.cancel_requested
      AND (r.status = 'queued' OR (r.status = 'running' AND r.lease_expires_at < now()))
      AND NOT EXISTS (
          SELECT 1 FROM agents_run o
          WHERE o.session_id = r.session_id AND o.id <> r.id
            AND (o.status = 'running' OR (o.status = 'queued' AND o.id < r.id)))
      AND (SELECT count(*) FROM agents_run t
           WHERE t.tenant_id = r.tenant_id AND t.status = 'running' AND t.id <> r.id) < %(per_tenant)s
      AND (SELECT count(*) FROM agents_run g WHERE g.status = 'running' AND g.id <> r.id) < %(global)s
    FOR UPDATE OF r SKIP LOCKED
), claimed AS (
    UPDATE agents_run r SET status = 'running', attempt = r.attempt + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + make_interval(secs => %(lease)s), heartbeat_at = now(),
        started_at = coalesce(r.started_at, now())
    FROM cand WHERE r.id = cand.id
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
"""


def claim_run(run_id: int, owner: str) -> Claim | None:
    """Take the run for ``owner`` if it is claimable now; ``None`` otherwise (another
    worker has it, its session is busy, a limit is reached, or it is finished)."""
    claims = claim_runs([run_id], owner)
    return claims[0] if claims else None


def claim_runs(run_ids: list[int], owner: str) -> list[Claim]:
    """Claim whichever of ``run_ids`` are claimable, oldest first, in one transaction
    (the advisory lock is taken once: a burst of runs costs one short lock, not one
    per run). Each claim still checks the session slot and the limits, so runs
    claimed earlier in the batch count against the later ones."""
    claims: list[Claim] = []
    params: dict[str, Any] = {
        "owner": owner[:200],
        "lease": float(settings.CLAW_RUN_LEASE_SECONDS),
        "per_tenant": settings.CLAW_RUNS_PER_TENANT,
        "global": settings.CLAW_RUNS_GLOBAL,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK_KEY])
        for run_id in sorted(set(run_ids)):
            cursor.execute(_CLAIM_SQL, {**params, "run": run_id})
            row = cursor.fetchone()
            if row is not None:
                claims.append(Claim(*row))
    return claims


def claimable_run_ids(limit: int) -> list[int]:
    """Queued runs and runs whose lease expired, oldest first: what a worker that just
    (re)connected to the database looks at before it listens for new ones."""
    return list(
        Run._base_manager.filter(
            Q(status=RunStatus.QUEUED) | Q(status=RunStatus.RUNNING, lease_expires_at__lt=timezone.now()),
            cancel_requested=False,
        )
        .order_by("id")
        .values_list("id", flat=True)[:limit]
    )
