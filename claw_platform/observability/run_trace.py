"""A run's trace, from the worker's side: opened around the run's execution, then
stored (``observability_span``), counted (metrics) and exported (OTLP)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from agents.engine import tracing
from claw_platform.audit.models import AuditEvent
from claw_platform.db import db_async
from claw_platform.observability import logs, metrics, otlp
from claw_platform.observability.models import Span
from claw_platform.observability.security_audit import security_events

logger = logging.getLogger(__name__)


def trace_id_for_run(run_id: int) -> str:
    """The run's trace id: the same for every execution of the run (a resume after
    an approval or a crashed worker adds to the same trace)."""
    return hashlib.blake2b(f"claw-run:{run_id}".encode(), digest_size=16).hexdigest()


@contextlib.asynccontextmanager
async def traced_run(
    run_id: int, tenant_id: int, *, first_attempt: bool
) -> AsyncIterator[tracing.SpanRecord]:
    """The root span of one execution of a run. The caller names it once the agent
    is known (:func:`describe_run`) and sets ``claw.run.status`` on it."""
    trace_id = trace_id_for_run(run_id)
    ids = logs.bind_ids(tenant_id=tenant_id, run_id=run_id, trace_id=trace_id)
    with tracing.start_trace(trace_id) as trace:
        root: tracing.SpanRecord | None = None
        try:
            with tracing.span(
                "invoke_agent", tracing.SPAN_AGENT, {"gen_ai.operation.name": "invoke_agent"}
            ) as span:
                assert isinstance(span, tracing.SpanRecord)
                root = span
                yield span
        finally:
            if root is not None:
                status = str(
                    root.attributes.get("claw.run.status", "failed" if root.status == "error" else "")
                )
                await _finish(run_id, tenant_id, trace.spans, status, first_attempt=first_attempt)
            logs.unbind(ids)


def describe_run(agent: Any, session: Any) -> None:
    """Name the root span for its agent; verbose mode is the agent's setting."""
    trace = tracing.current_trace()
    root = trace.spans[0] if trace is not None and trace.spans else None
    if trace is None or root is None:
        return
    trace.verbose = root.verbose = bool(getattr(agent, "trace_verbose", False))
    root.name = f"invoke_agent {agent.name}"
    logs.bind_ids(session_id=session.pk, user_id=session.user_id, agent=agent.slug)
    root.update(
        {
            "gen_ai.agent.name": agent.name,
            "gen_ai.agent.id": str(agent.agent_id),
            "gen_ai.conversation.id": str(session.pk),
            "gen_ai.provider.name": agent.model.provider_name
            if hasattr(agent.model, "provider_name")
            else None,
            "gen_ai.request.model": getattr(agent.model, "model", None),
            "claw.tenant.id": str(session.tenant_id),
        }
    )


async def _finish(
    run_id: int, tenant_id: int, spans: list[tracing.SpanRecord], status: str, *, first_attempt: bool
) -> None:
    try:
        queue_wait = await db_async(_store_spans)(run_id, tenant_id, spans, first_attempt)
    except Exception as exc:
        # The trace is worth less than the run: a failed write is logged, not raised.
        logger.warning("could not store the trace of run %s: %s", run_id, type(exc).__name__)
        queue_wait = None
    try:
        metrics.record_run(spans, status, queue_wait)
        otlp.export_spans(spans)
    except Exception:
        logger.exception("could not record the metrics or export the trace of run %s", run_id)


@transaction.atomic
def _store_spans(
    run_id: int, tenant_id: int, spans: list[tracing.SpanRecord], first_attempt: bool
) -> float | None:
    audit = security_events(run_id, tenant_id, spans)
    if audit:
        AuditEvent._base_manager.bulk_create(audit)
    Span._base_manager.bulk_create(
        [
            Span(
                tenant_id=tenant_id,
                run_id=run_id,
                trace_id=s.trace_id,
                span_id=s.span_id,
                parent_span_id=s.parent_id,
                name=s.name[:300],
                kind=s.kind,
                started_at=datetime.fromtimestamp(s.start_ns / 1e9, tz=UTC),
                duration_ms=s.duration_ms,
                status=s.status,
                error=s.error,
                attributes=s.attributes,
                input=s.input,
                output=s.output,
            )
            for s in spans
        ],
        ignore_conflicts=True,
    )
    if not first_attempt:
        return None
    from agents.models import Run

    times = Run._base_manager.filter(pk=run_id).values_list("created_at", "started_at").first()
    if times is None or times[1] is None:
        return None
    return max(0.0, (times[1] - times[0]).total_seconds())
