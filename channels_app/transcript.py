"""What a chat client shows of a session, read from the database: the page's first
render and the state a reconnecting socket re-renders a live turn from (U2, Z4).

A turn is one JSON object: the user's text, its run (status, error, last event
number), the messages it stored (engine JSON: role + parts), the step in flight (an
assistant message whose tool calls are running or waiting for approval, with the
results already known), the partial text of the reply being streamed, and its
approval requests. Long tool outputs are cut for display; history keeps them whole.
"""

from __future__ import annotations

from typing import Any

from agents.models import (
    ApprovalRequest,
    Attachment,
    MessageState,
    Run,
    RunEvent,
    RunStatus,
    Session,
    ToolCallMark,
    Turn,
    TurnState,
)
from agents.models import Message as StoredMessage

MAX_TURNS = 50
MAX_TOOL_OUTPUT_CHARS = 20_000
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


def session_summary(session: Session) -> dict[str, Any]:
    return {
        "id": str(session.pk),
        "title": str(session),
        "agent": session.agent.name,
        "agent_slug": session.agent.slug,
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "cost": f"{session.cost:.4f}",
        "show_thinking": session.agent.show_thinking,
    }


def session_turns(session: Session, *, limit: int = MAX_TURNS) -> list[dict[str, Any]]:
    """The newest ``limit`` turns of the session's active thread, oldest first, in
    four queries whatever their number."""
    if session.active_thread_id is None:
        return []
    turns = list(
        Turn._base_manager.filter(thread_id=session.active_thread_id, tenant_id=session.tenant_id)
        .exclude(state=TurnState.REWOUND)  # taken back by Regenerate, Edit or Retry
        .order_by("-number")[:limit]
    )
    turns.reverse()
    return _states(turns)


def turn_state(turn: Turn) -> dict[str, Any]:
    return _states([turn])[0]


def _states(turns: list[Turn]) -> list[dict[str, Any]]:
    if not turns:
        return []
    ids = [t.pk for t in turns]
    tenant_id = turns[0].tenant_id
    messages: dict[int, list[dict[str, Any]]] = {}
    visible_turns: set[int] = set(ids)
    for turn_id, role, parts, state in (
        StoredMessage._base_manager.filter(turn_id__in=ids, tenant_id=tenant_id)
        .order_by("seq")
        .values_list("turn_id", "role", "parts", "state")
    ):
        if state == MessageState.UNDONE:
            visible_turns.discard(turn_id)
            continue
        messages.setdefault(turn_id, []).append({"role": role, "parts": [_display_part(p) for p in parts]})
    runs = {r.turn_id: r for r in Run._base_manager.filter(turn_id__in=ids, tenant_id=tenant_id)}
    live = [r for r in runs.values() if r.status in UNFINISHED]
    approvals: dict[int, list[dict[str, Any]]] = {}
    marks: dict[int, dict[str, dict[str, Any]]] = {}
    if live:
        for a in ApprovalRequest._base_manager.filter(run__in=live).order_by("id"):
            approvals.setdefault(a.run_id, []).append(
                {
                    "id": a.pk,
                    "call_id": a.call_id,
                    "tool": a.tool_name,
                    "arguments": a.arguments,
                    "risk": a.risk,
                    "reason": a.request_reason,
                    "details": a.details,
                    "status": a.status,
                }
            )
        for turn_id, call_id, result in ToolCallMark._base_manager.filter(
            turn_id__in=[r.turn_id for r in live], result__isnull=False
        ).values_list("turn_id", "call_id", "result"):
            if result is not None:
                marks.setdefault(turn_id, {})[call_id] = _display_part(result)
    handoffs: dict[int, list[dict[str, Any]]] = {}
    for run_id, payload in RunEvent._base_manager.filter(
        run_id__in=[r.pk for r in runs.values()], tenant_id=tenant_id, type="handoff"
    ).values_list("run_id", "payload"):
        handoffs.setdefault(run_id, []).append(payload)
    attached: dict[int, list[dict[str, Any]]] = {}
    for a_id, turn_id, kind, name, path in (
        Attachment._base_manager.filter(turn_id__in=ids, tenant_id=tenant_id)
        .order_by("pk")
        .values_list("pk", "turn_id", "kind", "name", "workspace_path")
    ):
        attached.setdefault(turn_id, []).append({"id": a_id, "kind": kind, "name": name, "path": path})
    states = []
    for turn in turns:
        if turn.pk not in visible_turns:
            continue
        run = runs.get(turn.pk)
        running = run is not None and run.status in UNFINISHED
        pending = None
        if running and turn.pending_step:
            pending = {
                "parts": [_display_part(p) for p in turn.pending_step["assistant"]["parts"]],
                "results": marks.get(turn.pk, {}),
            }
        states.append(
            {
                "turn": turn.pk,
                "number": turn.number,
                "text": turn.user_text,
                "state": turn.state,
                "created_at": turn.created_at.isoformat() if turn.created_at else None,
                "finished_at": turn.finished_at.isoformat() if turn.finished_at else None,
                "error": turn.error,
                "run": (
                    {"id": run.pk, "status": run.status, "error": run.error, "seq": run.event_seq}
                    if run is not None
                    else None
                ),
                "messages": messages.get(turn.pk, []),
                "attachments": attached.get(turn.pk, []),
                "pending": pending,
                "partial": turn.partial_text if running else "",
                # The delivered reply (sanitized, with the failed-tools footer).
                "reply": turn.response_text,
                "approvals": approvals.get(run.pk, []) if run is not None else [],
                # G5: "<agent> handed this chat over to <agent>" notes.
                "handoffs": handoffs.get(run.pk, []) if run is not None else [],
            }
        )
    return states


def _display_part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") == "tool_result":
        content = str(part.get("content", ""))
        if len(content) > MAX_TOOL_OUTPUT_CHARS:
            cut = len(content) - MAX_TOOL_OUTPUT_CHARS
            part = {**part, "content": content[:MAX_TOOL_OUTPUT_CHARS] + f"\n… ({cut:,} more characters)"}
    elif part.get("type") == "image":
        part = {"type": "image", "media_type": part.get("media_type", "")}
    return part
