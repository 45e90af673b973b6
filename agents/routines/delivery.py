"""Where a routine's output goes (C6).

- The session: an agent routine's run answers in its session (the routine's own or
  the one that scheduled it): the reply is stored there and pushed live to every open
  chat by the run itself.
- A chat-platform channel (``deliver_channel`` + ``deliver_target``, a chat id on it):
  the output is sent with :func:`channels_app.delivery.deliver_to_channel`.
- A webhook (``webhook_url``): a JSON POST through the tenant's SSRF guard, signed
  with ``webhook_secret`` (``X-Claw-Signature``, as the budget alerts and hooks sign:
  ``tools_app.hooks.kinds.sign_webhook`` over the timestamp and body).

Each settled run (ok or failed; skipped ones are not delivered) is delivered after
its transaction commits, in a thread of its own (a slow platform never holds up the
scheduler; ``CLAW_ROUTINE_DELIVERY_INLINE`` delivers inline). What happened at each
destination is written on the RoutineRun (``delivery``: "channel: sent; webhook:
HTTP 200", or the failure); a delivery's failure never changes the run's outcome.
More destinations can register with :func:`register_deliverer`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

from agents.models import Routine, RoutineRun

if TYPE_CHECKING:
    from tools_app.guards.ssrf import SsrfGuard

logger = logging.getLogger("claw.routines.delivery")

WEBHOOK_TIMEOUT_SECONDS = 10.0
NOTE_CHARS = 500

# A deliverer returns its note ("" when the routine does not ask for it).
Deliverer = Callable[[RoutineRun], str]
_deliverers: dict[str, Deliverer] = {}


def register_deliverer(name: str, deliverer: Deliverer) -> None:
    _deliverers[name] = deliverer


def text_of(row: RoutineRun) -> str:
    if row.status == "ok":
        return row.output or "(no output)"
    return f"Routine {row.routine.name!r} {row.status}: {row.reason or 'no reason given'}"


def to_channel(row: RoutineRun) -> str:
    routine = row.routine
    if routine.deliver_channel_id is None or not routine.deliver_target:
        return ""
    from channels_app.adapters.base import AdapterError
    from channels_app.delivery import deliver_to_channel
    from channels_app.models import Channel

    channel = Channel._base_manager.filter(pk=routine.deliver_channel_id, tenant_id=row.tenant_id).first()
    if channel is None:
        return "channel: failed: the channel is gone"
    try:
        deliver_to_channel(channel, routine.deliver_target, text_of(row))
    except AdapterError as exc:
        if getattr(exc, "sweep_retries", False):  # kept: a worker's sweep sends it later
            return f"channel: postponed: {str(exc)[:200]}"
        return f"channel: failed: {str(exc)[:200]}"
    except Exception as exc:  # a timeout, a dropped connection: recorded, never raised
        return f"channel: failed: {type(exc).__name__}"
    return "channel: sent"


def webhook_document(row: RoutineRun) -> dict[str, object]:
    return {
        "type": "routine.run",
        "routine": {"id": row.routine_id, "name": row.routine.name},
        "run": {
            "id": row.pk,
            "status": row.status,
            "reason": row.reason,
            "output": row.output,
            "scheduled_for": row.scheduled_for.isoformat() if row.scheduled_for else None,
            "finished_at": row.finished_at.isoformat() if row.finished_at else None,
            "agent_run": row.run_id,
        },
    }


async def post_webhook(guard: SsrfGuard, url: str, secret: str, body: bytes) -> str:
    from tools_app.guards.ssrf import BlockedDestination
    from tools_app.hooks.kinds import sign_webhook
    from tools_app.net.fetch import guarded_request
    from tools_app.net.transports import guarded_client

    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ClawPlatform-Routine/1",
        "X-Claw-Event": "routine.run",
        "X-Claw-Timestamp": timestamp,
    }
    if secret:
        headers["X-Claw-Signature"] = sign_webhook(secret, timestamp, body)
    try:
        async with guarded_client(guard, timeout=WEBHOOK_TIMEOUT_SECONDS) as client:
            response = await guarded_request(
                client, guard, "POST", url, headers=headers, content=body, max_bytes=4096, max_redirects=0
            )
    except BlockedDestination as exc:
        return f"webhook: refused: {exc.message}"[:200]
    except Exception as exc:  # network errors of every kind end as a note
        return f"webhook: failed: {type(exc).__name__}"
    if response.status >= 400:
        return f"webhook: failed: HTTP {response.status}"
    return f"webhook: HTTP {response.status}"


def to_webhook(row: RoutineRun) -> str:
    routine = row.routine
    if not routine.webhook_url:
        return ""
    from tools_app.runtime.network import guard_for_tenant

    body = json.dumps(webhook_document(row)).encode()
    guard = guard_for_tenant(row.tenant_id)  # the tenant's allow-list, read before the loop
    return asyncio.run(post_webhook(guard, routine.webhook_url, routine.webhook_secret or "", body))


register_deliverer("channel", to_channel)
register_deliverer("webhook", to_webhook)


def deliver_now(routine_run_id: int) -> str:
    """Deliver one settled run to every destination it asks for; returns (and
    stores) the notes."""
    row = RoutineRun._base_manager.select_related("routine").filter(pk=routine_run_id).first()
    if row is None:
        return ""
    notes: list[str] = []
    for name, deliverer in list(_deliverers.items()):
        try:
            note = deliverer(row)
        except Exception:
            logger.exception("routine run %s: delivery %s failed", routine_run_id, name)
            note = f"{name}: failed: internal error"
        if note:
            notes.append(note)
    summary = "; ".join(notes)[:NOTE_CHARS]
    if summary:
        RoutineRun._base_manager.filter(pk=row.pk).update(delivery=summary)
        if "failed" in summary or "refused" in summary:
            logger.warning("routine run %s: %s", routine_run_id, summary)
    return summary


def wants_delivery(routine: Routine) -> bool:
    return bool((routine.deliver_channel_id and routine.deliver_target) or routine.webhook_url)


def deliver(routine_run_id: int) -> None:
    """After commit: deliver in a thread of its own (inline with
    ``CLAW_ROUTINE_DELIVERY_INLINE``)."""
    if settings.CLAW_ROUTINE_DELIVERY_INLINE:
        deliver_now(routine_run_id)
        return

    def work() -> None:
        try:
            deliver_now(routine_run_id)
        except Exception:
            logger.exception("routine run %s: delivery failed", routine_run_id)
        finally:
            connection.close()

    threading.Thread(target=work, name="claw-routine-delivery", daemon=True).start()


MEMBER_TARGET_REFUSAL = (
    "a member may send a routine's output only to a chat of their own with this agent: "
    "one they have written to it from, or their linked account's"
)


def delivery_target_refusal(
    channel_id: int, target: str, user_id: int | None, role: str | None
) -> str | None:
    """Why ``user_id`` (with ``role`` in the tenant; None: the tenant itself, an
    operator's key) may not have a routine's output sent to chat ``target`` on the
    channel, or None. Owners and admins may name any chat of the agent's bots; a
    member only the chats they talk to the agent in (a bot is no way to write to
    groups or people the member does not reach through it)."""
    from agents.routines.heartbeat_notice import linked_targets
    from channels_app.models import Channel, ChannelConversation
    from claw_platform.tenancy.models import Role

    if role is None or role in (Role.OWNER, Role.ADMIN):
        return None
    if user_id is None:
        return MEMBER_TARGET_REFUSAL
    if ChannelConversation._base_manager.filter(
        channel_id=channel_id, chat_id=target, session__user_id=user_id
    ).exists():
        return None
    agent_id = Channel._base_manager.filter(pk=channel_id).values_list("agent_id", flat=True).first()
    if agent_id is not None and any(
        t.channel_id == channel_id and t.chat_id == target for t in linked_targets(agent_id, user_id)
    ):
        return None
    return MEMBER_TARGET_REFUSAL
