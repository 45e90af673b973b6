"""Security events of a run, joined to the audit trail from its spans (Z3): the
injection guard's detections, calls a guard or policy refused (SSRF, path guard,
sandbox/execution policy, secrets, the tool policy, a blocking hook) and MCP calls.
Written with the run's spans, in the same transaction."""

from __future__ import annotations

from typing import Any

from agents.engine import tracing
from claw_platform.audit.models import AuditEvent

# Error types that mean a guard or a policy refused the call (tools_app/registry.py).
GUARD_REFUSALS = frozenset(
    {
        "ssrf_blocked",
        "path_policy_blocked",
        "execution_policy_blocked",
        "env_access_blocked",
        "policy_denied",
        "hook_blocked",
    }
)


def security_events(run_id: int, tenant_id: int, spans: list[tracing.SpanRecord]) -> list[AuditEvent]:
    events: list[AuditEvent] = []
    for span in spans:
        attrs = span.attributes
        error_type = str(attrs.get("error.type", ""))
        base: dict[str, Any] = {"run": run_id, "trace_id": span.trace_id, "span_id": span.span_id}
        if span.kind == tracing.SPAN_GUARD:
            events.append(
                _event(
                    tenant_id,
                    "security.injection_detected",
                    "agents.run",
                    str(run_id),
                    {
                        **base,
                        "findings": list(attrs.get("claw.guard.findings", [])),
                        "mode": attrs.get("claw.guard.mode", ""),
                        "blocked": span.status == "error",
                    },
                )
            )
        elif span.kind == tracing.SPAN_TOOL:
            tool = str(attrs.get("gen_ai.tool.name", ""))
            server = attrs.get("claw.mcp.server")
            if server:
                events.append(
                    _event(
                        tenant_id,
                        "mcp.call",
                        "tools_app.mcpserver",
                        str(server),
                        {
                            **base,
                            "tool": str(attrs.get("claw.mcp.tool", tool)),
                            "status": span.status,
                            "error_type": error_type,
                        },
                    )
                )
            if span.status == "error" and error_type in GUARD_REFUSALS:
                events.append(
                    _event(
                        tenant_id,
                        "security.refused",
                        "agents.run",
                        str(run_id),
                        {**base, "tool": tool, "error_type": error_type, "reason": span.error[:500]},
                    )
                )
    return events


def _event(tenant_id: int, action: str, object_type: str, object_id: str, diff: dict[str, Any]) -> AuditEvent:
    return AuditEvent(
        tenant_id=tenant_id,
        actor_label="system",
        action=action,
        object_type=object_type,
        object_id=object_id[:64],
        object_repr=f"{action} {object_id}"[:300],
        diff=diff,
    )
