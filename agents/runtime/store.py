"""The PostgreSQL implementation of the engine's ``RunStore`` for one turn.

Every method commits on its own (the engine never holds a transaction across an LLM
call or a tool run). ``persist_step`` writes a step's messages, usage records and
session totals in ONE transaction, with message numbers taken from the thread's
counter under its row lock, so concurrent writers never interleave a history (S7).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from psycopg.types.json import Jsonb

from agents.engine.interfaces import CompactionRecord, ConversationState, PendingStep, StepRecord
from agents.engine.types import ImagePart, Part, ToolCallPart, ToolResultPart, part_from_dict, part_to_dict
from agents.engine.types import Message as EngineMessage
from agents.models import Message, MessageState, Session, Thread, ToolCallMark, Turn, UsageRecord
from agents.runtime.partials import partial_writer
from claw_platform.db import db_async
from claw_platform.prepared import prepared_cursor


@dataclass(frozen=True)
class TurnBinding:
    """Which rows a store writes to. Ids only: the store never trusts a caller's
    model instances to be fresh."""

    tenant_id: int
    session_id: Any
    thread_id: Any
    turn_id: int
    agent_id: int
    user_id: int | None
    # A sub-agent's or consulted agent's store: the run its usage counts against.
    parent_run_id: int | None = None
    # O1: what each usage row is linked to -- the run (a sub-agent's: its parent's),
    # the API key that started it, the routine that fired it.
    run_id: int | None = None
    api_key_id: int | None = None
    routine_id: int | None = None


# Data-modifying CTEs run in one snapshot and commit together. Messages are numbered
# from the thread's counter; ``t`` is empty when there is nothing to append.
_PERSIST_STEP_SQL = """
WITH t AS (
    UPDATE agents_thread SET last_seq = last_seq + %(n)s
    WHERE id = %(thread)s AND %(n)s > 0
    RETURNING last_seq - %(n)s AS base
), msgs AS (
    INSERT INTO agents_message (tenant_id, session_id, thread_id, turn_id, seq, role, parts, state, created_at)
    SELECT %(tenant)s, %(session)s, %(thread)s, %(turn)s, t.base + m.ord, m.msg->>'role', m.msg->'parts',
           'active', now()
    FROM t, jsonb_array_elements(%(messages)s) WITH ORDINALITY AS m(msg, ord)
), usage AS (
    INSERT INTO agents_usagerecord (tenant_id, agent_id, user_id, session_id, turn_id, parent_run_id, run_id,
        api_key_id, routine_id, provider, model, purpose, input_tokens, output_tokens, cache_read_tokens,
        cache_write_tokens, cost, latency_ms, stop_reason, error, counted, created_at)
    SELECT %(tenant)s, %(agent)s, %(user)s, %(session)s, %(turn)s, %(parent_run)s, %(run)s, %(api_key)s,
        %(routine)s, u.provider, u.model, u.purpose,
        u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cost, u.latency_ms,
        u.stop_reason, u.error, false, now()
    FROM jsonb_to_recordset(%(usage)s) AS u(provider text, model text, purpose text, input_tokens int,
        output_tokens int, cache_read_tokens int, cache_write_tokens int, cost numeric, latency_ms int,
        stop_reason text, error text)
), turn AS (
    UPDATE agents_turn SET pending_step = %(pending)s, partial_text = ''
    WHERE id = %(turn)s AND %(write_turn)s
), marks AS (
    DELETE FROM agents_toolcallmark WHERE turn_id = %(turn)s AND %(clear_marks)s
)
SELECT count(*) FROM t
"""


# The state a run starts from, in two plain statements (the ORM's compiling of three
# queries cost more than the database's answering them).
_LOAD_STATE_SQL = """
SELECT (SELECT summary FROM agents_thread WHERE id = %(thread)s),
       (SELECT pending_step FROM agents_turn WHERE id = %(turn)s)
"""
_LOAD_MESSAGES_SQL = """
SELECT role, parts, turn_id FROM agents_message WHERE thread_id = %(thread)s AND state = %(state)s
ORDER BY seq DESC LIMIT %(limit)s
"""


def _has_placeholder(message: EngineMessage) -> bool:
    return message.role == "user" and any(isinstance(p, ImagePart) and p.data is None for p in message.parts)


def with_recent_images(
    messages: list[EngineMessage], turn_ids: list[int | None], current_turn: int, tenant_id: int
) -> list[EngineMessage]:
    """History as the model gets it (E23): the images attached in this turn and the
    ``CLAW_CHAT_IMAGE_TURNS - 1`` turns before it are sent again (a regenerated,
    edited, retried or resumed turn included); older ones stay placeholders."""
    from django.conf import settings

    from agents.actions.attachments import images_by_turn

    numbers = dict(
        Turn._base_manager.filter(pk__in={t for t in turn_ids if t} | {current_turn}).values_list(
            "pk", "number"
        )
    )
    now = numbers.get(current_turn)
    if now is None:
        return messages
    recent = {t for t, n in numbers.items() if now - n < settings.CLAW_CHAT_IMAGE_TURNS}
    images = images_by_turn(recent, tenant_id)
    out: list[EngineMessage] = []
    for message, turn in zip(messages, turn_ids, strict=True):
        stored = images.get(turn or 0) if _has_placeholder(message) else None
        if not stored:
            out.append(message)
            continue
        queue = list(stored)
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ImagePart) and part.data is None and queue:
                parts.append(queue.pop(0))
            else:
                parts.append(part)
        out.append(EngineMessage(message.role, parts))
    return out


def _json(value: Any) -> Any:
    """A jsonb column read with a plain cursor (Django has psycopg return its text)."""
    return json.loads(value) if isinstance(value, str) else value


def _usage_row(record: Any) -> dict[str, Any]:
    return {
        "provider": record.provider[:100],
        "model": record.model[:200],
        "purpose": record.purpose,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_tokens": record.cache_write_tokens,
        "cost": str(record.cost),
        "latency_ms": record.latency_ms,
        "stop_reason": record.stop_reason[:32],
        "error": record.error,
    }


class DjangoRunStore:
    """One run's writer. It remembers what it has stored in the turn row (a pending
    step, partial text, tool marks) so a step writes only what changed: the hot path
    of a tool-using turn is a handful of statements per iteration."""

    def __init__(self, binding: TurnBinding, *, send_images: bool = False) -> None:
        self.binding = binding
        # The run's model takes images: the history's recent ones are sent again (E23).
        self.send_images = send_images
        self._pending_stored: bool | None = None  # None: not known yet
        self._partial_stored = True
        self._marked: set[str] = set()

    # -- reading ---------------------------------------------------------------

    async def load_conversation(self, *, max_messages: int) -> ConversationState:
        return await db_async(self._load)(max_messages)

    def _load(self, max_messages: int) -> ConversationState:
        b = self.binding
        with prepared_cursor() as cursor:
            cursor.execute(_LOAD_STATE_SQL, {"thread": b.thread_id, "turn": b.turn_id})
            row = cursor.fetchone()
            # Newest first through the partial index, then back to oldest first: the
            # cost is bounded by max_messages, not by the age of the session.
            cursor.execute(
                _LOAD_MESSAGES_SQL,
                {"thread": b.thread_id, "state": MessageState.ACTIVE, "limit": max_messages},
            )
            rows = cursor.fetchall()
        summary, pending = (row[0] or "", row[1]) if row is not None else ("", None)
        rows.reverse()
        messages = [EngineMessage.from_dict({"role": role, "parts": _json(parts)}) for role, parts, _ in rows]
        if self.send_images and any(_has_placeholder(m) for m in messages):
            messages = with_recent_images(messages, [turn for _, _, turn in rows], b.turn_id, b.tenant_id)
        return ConversationState(summary=summary, messages=messages, pending=self._pending(_json(pending)))

    def _pending(self, raw: dict[str, Any] | None) -> PendingStep | None:
        """The turn's step in flight (``raw``: its stored ``pending_step``, as read)."""
        self._pending_stored = bool(raw)
        if not raw:
            return None
        assistant = EngineMessage.from_dict(raw["assistant"])
        finished: dict[str, ToolResultPart] = {}
        started: set[str] = set()
        for call_id, result in ToolCallMark._base_manager.filter(turn_id=self.binding.turn_id).values_list(
            "call_id", "result"
        ):
            self._marked.add(call_id)
            if result is None:
                started.add(call_id)
            else:
                part = part_from_dict(result)
                assert isinstance(part, ToolResultPart)
                finished[call_id] = part
        approvals = {str(k): bool(v) for k, v in (raw.get("approvals") or {}).items()}
        return PendingStep(
            assistant=assistant, finished=finished, started=frozenset(started), approvals=approvals
        )

    # -- writing ---------------------------------------------------------------

    async def persist_step(self, step: StepRecord) -> None:
        # The step clears the partial text: no checkpoint may land after it.
        await partial_writer().forget(self.binding.turn_id)
        await db_async(self._persist_step)(step)

    def _persist_step(self, step: StepRecord) -> None:
        """One statement, so one round trip and atomic on its own (S7): the thread's
        counter is bumped (its row lock orders concurrent writers), the messages are
        numbered from it, and usage, pending step and tool marks are written with it."""
        b = self.binding
        pending = {"assistant": step.pending.to_dict()} if step.pending is not None else None
        write_turn = pending is not None or self._pending_stored is not False or self._partial_stored
        clear_marks = step.pending is None and (bool(self._marked) or self._pending_stored is None)
        params = {
            "tenant": b.tenant_id,
            "session": b.session_id,
            "thread": b.thread_id,
            "turn": b.turn_id,
            "agent": b.agent_id,
            "user": b.user_id,
            "parent_run": b.parent_run_id,
            "run": b.run_id,
            "api_key": b.api_key_id,
            "routine": b.routine_id,
            "n": len(step.messages),
            "messages": Jsonb([m.to_dict() for m in step.messages]),
            "usage": Jsonb([_usage_row(r) for r in step.usage]),
            "pending": Jsonb(pending) if pending is not None else None,
            "write_turn": write_turn,
            "clear_marks": clear_marks,
        }
        with prepared_cursor() as cursor:
            cursor.execute(_PERSIST_STEP_SQL, params)
            row = cursor.fetchone()
        if step.messages and not (row and row[0]):
            raise RuntimeError("the thread of this run no longer exists")
        if clear_marks:
            self._marked.clear()
        self._pending_stored = pending is not None
        self._partial_stored = False

    def _record_usage(self, records: list[Any]) -> None:
        b = self.binding
        UsageRecord._base_manager.bulk_create(
            [
                UsageRecord.of_call(
                    r,
                    tenant_id=b.tenant_id,
                    agent_id=b.agent_id,
                    user_id=b.user_id,
                    session_id=b.session_id,
                    turn_id=b.turn_id,
                    parent_run_id=b.parent_run_id,
                    run_id=b.run_id,
                    api_key_id=b.api_key_id,
                    routine_id=b.routine_id,
                    purpose=r.purpose,
                )
                for r in records
            ]
        )
        # Session totals are rolled up when the turn ends (roll_up_session_usage):
        # one statement per turn instead of one per LLM call.

    async def record_usage(self, records: list[Any]) -> None:
        """Usage of calls outside a step (titles); same accounting."""
        if records:
            await db_async(transaction.atomic(self._record_usage))(records)

    async def checkpoint_partial(self, text: str) -> None:
        # Written with the other runs' checkpoints of this loop, a moment later.
        partial_writer().put(self.binding.turn_id, text)
        self._partial_stored = True

    async def mark_tool_started(self, call: ToolCallPart, *, side_effects: bool) -> None:
        # Only calls with side effects need a durable mark: after a crash a read-only
        # call is simply run again, a side-effecting one is reported as interrupted.
        if side_effects:
            await db_async(self._mark_started)(call, side_effects)

    def _mark_started(self, call: ToolCallPart, side_effects: bool) -> None:
        ToolCallMark._base_manager.get_or_create(
            turn_id=self.binding.turn_id,
            call_id=call.id,
            defaults={
                "tenant_id": self.binding.tenant_id,
                "name": call.name[:200],
                "side_effects": side_effects,
            },
        )
        self._marked.add(call.id)

    async def mark_tool_finished(self, result: ToolResultPart) -> None:
        if result.tool_call_id in self._marked:
            await db_async(self._mark_finished)(result)

    def _mark_finished(self, result: ToolResultPart) -> None:
        ToolCallMark._base_manager.filter(turn_id=self.binding.turn_id, call_id=result.tool_call_id).update(
            result=part_to_dict(result), finished_at=timezone.now()
        )

    async def save_compaction(self, record: CompactionRecord) -> None:
        await db_async(self._save_compaction)(record)

    @transaction.atomic
    def _save_compaction(self, record: CompactionRecord) -> None:
        b = self.binding
        Thread._base_manager.select_for_update().filter(pk=b.thread_id).first()
        active = Message._base_manager.filter(thread_id=b.thread_id, state=MessageState.ACTIVE)
        if record.keep_last > 0:
            kept = list(active.order_by("-seq").values_list("seq", flat=True)[: record.keep_last])
            if len(kept) == record.keep_last:
                active.filter(seq__lt=kept[-1]).update(state=MessageState.COMPACTED)
        else:
            active.update(state=MessageState.COMPACTED)
        Thread._base_manager.filter(pk=b.thread_id).update(
            summary=record.summary, compaction_count=F("compaction_count") + 1
        )


class DjangoChildSessions:
    """Opens a sub-agent's session (E20): a child Session linked to the parent's,
    one level deeper, with a turn of its own whose store the child loop writes to.
    The child's cost reaches the parent through the run totals the engine shares."""

    def __init__(self, parent: TurnBinding) -> None:
        self.parent = parent

    async def open_child(self, *, parent: Any, call_id: str, title: str) -> DjangoRunStore:
        run_id = str(getattr(parent, "run_id", "") or "")
        return await db_async(self._open)(title, call_id, int(run_id) if run_id.isdigit() else None)

    def _open(self, title: str, call_id: str, parent_run_id: int | None = None) -> DjangoRunStore:
        from agents.actions.conversation import do_create_session, do_start_turn

        p = self.parent
        parent_session = Session._base_manager.select_related("agent", "user").get(pk=p.session_id)
        child = do_create_session(
            parent_session.agent,
            user=parent_session.user,
            channel="sub_agent",
            parent=parent_session,
            title=title or f"Sub-agent {call_id}",
        )
        turn = do_start_turn(child, title)
        return DjangoRunStore(
            TurnBinding(
                p.tenant_id,
                child.pk,
                turn.thread_id,
                turn.pk,
                p.agent_id,
                p.user_id,
                parent_run_id,
                run_id=p.run_id or parent_run_id,
                api_key_id=p.api_key_id,
                routine_id=p.routine_id,
            )
        )
