"""What the cost guard counts: every refused call and every threshold alert, as
Prometheus counters (``claw_platform.observability.metrics``, served at /metrics)."""

from __future__ import annotations


def count_budget_refusal(code: str, tenant_id: int) -> None:
    """A call refused: ``code`` is budget_exceeded, call_rate_exceeded, unpriced_model
    or llm_calls_stopped (the kill switch)."""
    from claw_platform.observability.metrics import count_budget_refusal as count

    count(code)


def count_budget_alert(tenant_id: int, threshold: int) -> None:
    from claw_platform.observability.metrics import count_budget_alert as count

    count(threshold)
