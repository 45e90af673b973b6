"""The PostgreSQL implementation of the engine's ``RunStore`` for one turn.

Every method commits on its own (the engine never holds a transaction across an LLM
call or a tool run). ``persist_step`` writes a step's messages, usage records and
session totals in ONE transaction, with message numbers taken from the thread's
counter under its row lock, so concurrent writers never interleave a history (S7).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.engine.interfaces import CompactionRecord, ConversationState, PendingStep, StepRecord
from agents.engine.types import Message as EngineMessage
from agents.engine.types import ToolCallPart, ToolResultPart, part_from_dict, part_to_dict
from agents.models import Message, MessageState, Session, Thread, ToolCallMark, Turn, UsageRecord


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


class DjangoRunStore:
    """One run's writer. It remembers what it has stored in the turn row (a pending
    step, partial text, tool marks) so a step writes only what changed: the hot path
    of a tool-using turn is a handful of statements per iteration."""

    def __init__(self, binding: TurnBinding) -> None:
        self.binding = binding
        self._pending_stored: bool | None = None  # None: not known yet
        self._partial_stored = True
        self._marked: set[str] = set()

    # -- reading ---------------------------------------------------------------

    async def load_conversation(self, *, max_messages: int) -> ConversationState:
        return await sync_to_async(self._load, thread_sensitive=False)(max_messages)

    def _load(self, max_messages: int) -> ConversationState:
        b = self.binding
        summary = Thread._base_manager.filter(pk=b.thread_id).values_list("summary", flat=True).first() or ""
        # Newest first through the partial index, then back to oldest first: the cost
        # is bounded by max_messages, not by the age of the session.
        rows = list(
            Message._base_manager.filter(thread_id=b.thread_id, state=MessageState.ACTIVE)
            .order_by("-seq")
            .values_list("role", "parts")[:max_messages]
        )
        rows.reverse()
        messages = [EngineMessage.from_dict({"role": role, "parts": parts}) for role, parts in rows]
        return ConversationState(summary=summary, messages=messages, pending=self._pending())

    def _pending(self) -> PendingStep | None:
        raw = (
            Turn._base_manager.filter(pk=self.binding.turn_id).values_list("pending_step", flat=True).first()
        )
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
        await sync_to_async(self._persist_step, thread_sensitive=False)(step)

    @transaction.atomic
    def _persist_step(self, step: StepRecord) -> None:
        b = self.binding
        if step.messages:
            count = len(step.messages)
            # UPDATE ... RETURNING takes the thread's row lock for the rest of the
            # transaction: the numbers are ours alone.
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE agents_thread SET last_seq = last_seq + %s WHERE id = %s RETURNING last_seq",
                    [count, b.thread_id],
                )
                row = cursor.fetchone()
            if row is None:
                raise RuntimeError("the thread of this run no longer exists")
            first = row[0] - count + 1
            Message._base_manager.bulk_create(
                [
                    Message(
                        tenant_id=b.tenant_id,
                        session_id=b.session_id,
                        thread_id=b.thread_id,
                        turn_id=b.turn_id,
                        seq=first + i,
                        role=m.role,
                        parts=[part_to_dict(p) for p in m.parts],
                    )
                    for i, m in enumerate(step.messages)
                ]
            )
        if step.usage:
            self._record_usage(step.usage)
        pending = {"assistant": step.pending.to_dict()} if step.pending is not None else None
        if pending is not None or self._pending_stored is not False or self._partial_stored:
            Turn._base_manager.filter(pk=b.turn_id).update(pending_step=pending, partial_text="")
        if step.pending is None and (self._marked or self._pending_stored is None):
            ToolCallMark._base_manager.filter(turn_id=b.turn_id).delete()
            self._marked.clear()
        transaction.on_commit(lambda: self._stored(pending is not None))

    def _stored(self, has_pending: bool) -> None:
        self._pending_stored = has_pending
        self._partial_stored = False

    def _record_usage(self, records: list[Any]) -> None:
        b = self.binding
        UsageRecord._base_manager.bulk_create(
            [
                UsageRecord(
                    tenant_id=b.tenant_id,
                    agent_id=b.agent_id,
                    user_id=b.user_id,
                    session_id=b.session_id,
                    turn_id=b.turn_id,
                    provider=r.provider[:100],
                    model=r.model[:200],
                    purpose=r.purpose,
                    input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    cache_read_tokens=r.cache_read_tokens,
                    cache_write_tokens=r.cache_write_tokens,
                    cost=r.cost,
                    latency_ms=r.latency_ms,
                    stop_reason=r.stop_reason[:32],
                    error=r.error,
                )
                for r in records
            ]
        )
        Session._base_manager.filter(pk=b.session_id).update(
            input_tokens=F("input_tokens") + sum(r.input_tokens for r in records),
            output_tokens=F("output_tokens") + sum(r.output_tokens for r in records),
            cache_read_tokens=F("cache_read_tokens") + sum(r.cache_read_tokens for r in records),
            cache_write_tokens=F("cache_write_tokens") + sum(r.cache_write_tokens for r in records),
            cost=F("cost") + sum((r.cost for r in records), Decimal(0)),
            last_activity_at=timezone.now(),
        )

    async def record_usage(self, records: list[Any]) -> None:
        """Usage of calls outside a step (titles); same accounting."""
        if records:
            await sync_to_async(transaction.atomic(self._record_usage), thread_sensitive=False)(records)

    async def checkpoint_partial(self, text: str) -> None:
        await sync_to_async(self._checkpoint_partial, thread_sensitive=False)(text)

    def _checkpoint_partial(self, text: str) -> None:
        Turn._base_manager.filter(pk=self.binding.turn_id).update(partial_text=text)
        self._partial_stored = True

    async def mark_tool_started(self, call: ToolCallPart, *, side_effects: bool) -> None:
        # Only calls with side effects need a durable mark: after a crash a read-only
        # call is simply run again, a side-effecting one is reported as interrupted.
        if side_effects:
            await sync_to_async(self._mark_started, thread_sensitive=False)(call, side_effects)

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
            await sync_to_async(self._mark_finished, thread_sensitive=False)(result)

    def _mark_finished(self, result: ToolResultPart) -> None:
        ToolCallMark._base_manager.filter(turn_id=self.binding.turn_id, call_id=result.tool_call_id).update(
            result=part_to_dict(result), finished_at=timezone.now()
        )

    async def save_compaction(self, record: CompactionRecord) -> None:
        await sync_to_async(self._save_compaction, thread_sensitive=False)(record)

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
        return await sync_to_async(self._open, thread_sensitive=False)(title, call_id)

    def _open(self, title: str, call_id: str) -> DjangoRunStore:
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
            TurnBinding(p.tenant_id, child.pk, turn.thread_id, turn.pk, p.agent_id, p.user_id)
        )
