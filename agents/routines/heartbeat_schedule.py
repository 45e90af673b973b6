"""The periodic heartbeat (C8): a routine of kind ``heartbeat`` per agent.

The agent's settings (``heartbeat_enabled``, ``heartbeat_interval_minutes``,
``heartbeat_active_start`` / ``_end`` in the agent's time zone) are kept in step
with one interval routine of action ``heartbeat`` (:func:`sync_heartbeat_routine`,
on every save of the agent), so the routine scheduler fires it exactly once per
interval with its usual claim (``FOR UPDATE SKIP LOCKED``), missed-run policy and
run history; no loop of its own.

A fire outside the active hours is skipped (recorded, no model call). A fire inside
them checks, one after the other, the agent's own HEARTBEAT.md and each user's copy
that has something to do (a file of blanks, headings and comments costs no call);
each finding goes to the "Heartbeat" session of that user with the agent, opened on
first use, and is pushed to an open chat of it. A finding of the agent's own file
is checked once and told to each owner and admin of the tenant, in their own
Heartbeat session with the agent (:func:`recipients`). With the agent's
``heartbeat_notify`` at ``linked`` (the default) each notice is also sent to the
chat-platform accounts its user linked on the agent's channels
(``heartbeat_notice.deliver_notices``). A reply of ``HEARTBEAT_OK`` or ``NO_REPLY``
posts nothing.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, time, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agents.models import (
    ActionKind,
    Agent,
    AgentFile,
    Routine,
    RoutineRun,
    RoutineRunStatus,
    RoutineStatus,
    TriggerKind,
)
from agents.routines.heartbeat import (
    HEARTBEAT_FILE,
    NOTHING_FOUND,
    NOTHING_TO_DO,
    Check,
    check_heartbeat,
    checklist,
    has_work,
)
from agents.routines.heartbeat_notice import (
    NOTICE_PROMPT,
    SHARED_NOTICE_PROMPT,
    deliver_notices,
    post_finding,
    shared_file_audience,
)
from agents.routines.outcome import finish_routine_run
from agents.routines.times import zone_of
from claw_platform.db import db_async, readable_failure
from claw_platform.tenancy.context import tenant_context

logger = logging.getLogger("claw.routines.heartbeat")

HEARTBEAT_NAME = "Heartbeat"
HEARTBEAT_PROMPT = "Check HEARTBEAT.md (the agent's and each user's) and report what needs attention."


def in_active_hours(start: time | None, end: time | None, zone_name: str, now: datetime) -> bool:
    """Whether ``now`` lies in [start, end) of the wall clock in ``zone_name``; a span
    past midnight (22:00 to 06:00) wraps; no span (or start == end) is all day."""
    if start is None or end is None or start == end:
        return True
    wall = now.astimezone(zone_of(zone_name)).time().replace(tzinfo=None)
    if start < end:
        return start <= wall < end
    return wall >= start or wall < end


def agent_in_active_hours(agent: Agent, now: datetime) -> bool:
    return in_active_hours(agent.heartbeat_active_start, agent.heartbeat_active_end, agent.timezone, now)


def heartbeat_routine_of(agent_id: int) -> Routine | None:
    return Routine._base_manager.filter(agent_id=agent_id, action=ActionKind.HEARTBEAT).order_by("id").first()


def sync_heartbeat_routine(agent: Agent, *, now: datetime | None = None) -> Routine | None:
    """Keep the agent's heartbeat routine in step with its settings: created when the
    heartbeat is first enabled, its interval updated, paused when disabled."""
    now = now or timezone.now()
    interval = int(agent.heartbeat_interval_minutes) * 60
    with tenant_context(agent.tenant_id), transaction.atomic():
        routine = heartbeat_routine_of(agent.pk)
        if routine is None:
            if not agent.heartbeat_enabled:
                return None
            return Routine._base_manager.create(
                tenant_id=agent.tenant_id,
                agent=agent,
                user=None,
                name=HEARTBEAT_NAME,
                prompt=HEARTBEAT_PROMPT,
                trigger=TriggerKind.INTERVAL,
                interval_seconds=interval,
                timezone=agent.timezone,
                action=ActionKind.HEARTBEAT,
                missed_policy="skip",  # a heartbeat missed during downtime is not worth replaying
                max_retries=0,  # the next interval is the retry
                pause_after_failures=0,
                next_run_at=now + timedelta(seconds=interval),
            )
        fields: list[str] = []
        wanted = RoutineStatus.ACTIVE if agent.heartbeat_enabled else RoutineStatus.PAUSED
        if routine.status != wanted and routine.status in (RoutineStatus.ACTIVE, RoutineStatus.PAUSED):
            routine.status = wanted
            fields.append("status")
            if wanted == RoutineStatus.ACTIVE:
                routine.next_run_at = now + timedelta(seconds=interval)
                fields.append("next_run_at")
        if routine.interval_seconds != interval:
            routine.interval_seconds = interval
            routine.next_run_at = now + timedelta(seconds=interval)
            fields += ["interval_seconds", "next_run_at"]
        if routine.timezone != agent.timezone:
            routine.timezone = agent.timezone
            fields.append("timezone")
        if fields:
            routine.save(update_fields=[*dict.fromkeys(fields), "updated_at"])
        return routine


def heartbeat_skip_reason(routine: Routine, now: datetime, *, manual: bool = False) -> str | None:
    """The reason a heartbeat fire is skipped now, if it is (firing's check); "run
    now" (``manual``) is not held to the active hours."""
    agent = Agent._base_manager.filter(pk=routine.agent_id).first()
    if agent is None or not agent.enabled:
        return "the agent is disabled"
    if manual or agent_in_active_hours(agent, now):
        return None
    start, end = agent.heartbeat_active_start, agent.heartbeat_active_end
    span = f"{start:%H:%M}-{end:%H:%M}" if start is not None and end is not None else ""
    return f"outside the heartbeat's active hours ({span} {agent.timezone})"


def targets(agent_id: int) -> list[tuple[int | None, str]]:
    """(user id or None for the agent's own file, checklist) of each HEARTBEAT.md
    with something to do (a user's copy while they are in the tenant)."""
    from claw_platform.tenancy.models import Membership

    files = AgentFile._base_manager.filter(agent_id=agent_id, name=HEARTBEAT_FILE)
    members = Membership._base_manager.filter(tenant_id=OuterRef("tenant_id"), user_id=OuterRef("user_id"))
    # The agent's own file, and the copies of users still in the tenant.
    owners = files.filter(Q(user__isnull=True) | Exists(members)).values_list("user_id", flat=True)
    found: list[tuple[int | None, str]] = []
    for user_id in sorted(set(owners), key=lambda u: (u is not None, u or 0)):
        text = checklist(agent_id, user_id, own_only=True)
        if has_work(text):
            found.append((user_id, text))
    return found


def recipients(agent: Agent, user_id: int | None) -> list[tuple[int | None, str]]:
    """(user, the notice's request line) of each Heartbeat session a finding of
    ``user_id``'s HEARTBEAT.md goes to: that user; for the agent's own file
    (``None``) each owner and admin of the tenant -- one check, several notices --
    or, in a tenant with none, the agent's own session (no user)."""
    if user_id is not None:
        return [(user_id, NOTICE_PROMPT)]
    audience = shared_file_audience(agent.tenant_id)
    return [(admin, SHARED_NOTICE_PROMPT) for admin in audience] or [(None, SHARED_NOTICE_PROMPT)]


def execute_heartbeat_run(row_id: int) -> None:
    """Run a started heartbeat RoutineRun (after the claiming commit) and settle it."""

    located = RoutineRun._base_manager.filter(pk=row_id).values_list("tenant_id", flat=True).first()
    if located is None:
        return
    with tenant_context(located):
        row = RoutineRun._base_manager.select_related("routine__agent").get(pk=row_id)
        routine = row.routine
        agent = routine.agent
        status, output, reason, cost = RoutineRunStatus.OK, NOTHING_TO_DO, "", Decimal(0)
        told: list[tuple[int | None, str]] = []  # (user, finding) posted to a Heartbeat chat
        try:
            work = targets(agent.pk)
            checks = asyncio.run(_check_all(agent, routine.pk, work)) if work else []
            findings: list[str] = []
            errors: list[str] = []
            for (user_id, _), check in zip(work, checks, strict=True):
                cost += check.cost
                who = f"user {user_id}" if user_id is not None else "the agent's own file"
                if check.error:
                    errors.append(f"{who}: {check.error}")
                elif check.finding:
                    for recipient, prompt in recipients(agent, user_id):
                        post_finding(agent, recipient, check.finding, prompt=prompt)
                        told.append((recipient, check.finding))
                    findings.append(check.finding if len(work) == 1 else f"[{who}] {check.finding}")
            if work:
                # The quiet outputs (NOTHING_TO_DO, NOTHING_FOUND) repeat by design: the
                # runaway check leaves them alone.
                output = "\n\n".join(findings) if findings else ("" if errors else NOTHING_FOUND)
            if errors:
                reason = "; ".join(errors)
                if len(errors) == len(checks):
                    status = RoutineRunStatus.FAILED
        except Exception as exc:  # a broken row or a bug: recorded on the run
            logger.exception("heartbeat run %s failed", row_id)
            status, output, reason = RoutineRunStatus.FAILED, "", readable_failure(exc)
        with transaction.atomic():
            locked = RoutineRun._base_manager.select_for_update().select_related("routine").get(pk=row_id)
            if locked.status != RoutineRunStatus.RUNNING:
                return  # settled meanwhile (the lost-worker sweep)
            locked.cost = cost
            finish_routine_run(locked, status, timezone.now(), output=output, reason=reason)
        # Also where the user talks: their linked chat accounts (``heartbeat_notify``).
        deliver_notices(row_id, agent, told)


async def _check_all(agent: Agent, routine_id: int, work: list[tuple[int | None, str]]) -> list[Check]:
    """Each checklist with one light call, one after the other."""
    from agents.runtime.llm import close_providers
    from agents.runtime.resolution import resolve_agent

    resolved = await db_async(resolve_agent)(agent.pk)
    try:
        return [
            await check_heartbeat(
                text,
                resolved,
                resolved.model,
                tenant_id=agent.tenant_id,
                user_id=user_id,
                routine_id=routine_id,
            )
            for user_id, text in work
        ]
    finally:
        await close_providers()


def execute_started_run(row_id: int) -> None:
    """Run a RoutineRun that firing started without an agent Run: shell or heartbeat."""
    from agents.routines.shell import execute_shell_run

    action = RoutineRun._base_manager.filter(pk=row_id).values_list("routine__action", flat=True).first()
    if action == ActionKind.HEARTBEAT:
        execute_heartbeat_run(row_id)
    elif action is not None:
        execute_shell_run(row_id)
