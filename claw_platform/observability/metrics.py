"""Prometheus metrics (O5), counted in every process (web, workers) and summed at
``/metrics`` by prometheus-client's multiprocess mode: each process writes its
counters to files in ``PROMETHEUS_MULTIPROC_DIR`` (set by the settings before
prometheus-client is first imported, ``./var/metrics/`` by default).

Run figures come from a finished run's spans (:func:`record_run`), so the engine
has one hook (its tracer). Queue depth and active sessions are read from the
database at scrape time (:mod:`claw_platform.observability.scrape`).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Histogram

from agents.engine import tracing

RUNS = Counter("claw_runs_total", "Run executions that ended, by status.", ["status"])
LLM_CALLS = Counter(
    "claw_llm_calls_total", "LLM calls, by provider, model and outcome.", ["provider", "model", "status"]
)
LLM_TOKENS = Counter(
    "claw_llm_tokens_total",
    "LLM tokens, by provider, model and direction.",
    ["provider", "model", "direction"],
)
LLM_COST = Counter(
    "claw_llm_cost_usd_total", "LLM cost in US dollars, by provider and model.", ["provider", "model"]
)
LLM_SECONDS = Histogram(
    "claw_llm_call_seconds",
    "Duration of LLM calls.",
    ["provider", "model"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
TOOL_CALLS = Counter(
    "claw_tool_executions_total", "Tool executions, by tool and outcome.", ["tool", "status"]
)
TOOL_FAILURES = Counter(
    "claw_tool_failures_total", "Failed tool executions, by tool and error type.", ["tool", "error_type"]
)
MCP_CALLS = Counter("claw_mcp_calls_total", "MCP tool calls, by server and outcome.", ["server", "status"])
MCP_REJECTIONS = Counter(
    "claw_mcp_rejections_total", "MCP calls refused, by server and reason.", ["server", "reason"]
)
BUDGET_REFUSALS = Counter(
    "claw_budget_refusals_total",
    "LLM calls refused by the cost guard, by reason (budget_exceeded, call_rate_exceeded, "
    "unpriced_model, llm_calls_stopped).",
    ["reason"],
)
BUDGET_ALERTS = Counter(
    "claw_budget_alerts_total", "Budget threshold alerts sent, by threshold (percent).", ["threshold"]
)
QUEUE_WAIT = Histogram(
    "claw_run_queue_wait_seconds",
    "Time from a run's message to a worker starting it.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)


# An MCP call the platform refused before it reached the server (tools_app/mcp).
MCP_REJECTION_TYPES = frozenset({"mcp_rate_limited", "mcp_circuit_open", "ssrf_blocked"})


def record_run(spans: Iterable[tracing.SpanRecord], status: str, queue_wait: float | None = None) -> None:
    """Count one finished execution of a run from its spans."""
    if status:
        RUNS.labels(status.replace(" ", "_")).inc()
    if queue_wait is not None:
        QUEUE_WAIT.observe(queue_wait)
    for span in spans:
        attrs = span.attributes
        if span.kind == tracing.SPAN_CHAT:
            provider = str(attrs.get("gen_ai.provider.name", ""))
            model = str(attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model", ""))
            LLM_CALLS.labels(provider, model, span.status).inc()
            LLM_SECONDS.labels(provider, model).observe(span.duration_ms / 1000)
            LLM_TOKENS.labels(provider, model, "input").inc(int(attrs.get("gen_ai.usage.input_tokens", 0)))
            LLM_TOKENS.labels(provider, model, "output").inc(int(attrs.get("gen_ai.usage.output_tokens", 0)))
            LLM_COST.labels(provider, model).inc(float(attrs.get("claw.cost_usd", 0.0)))
        elif span.kind == tracing.SPAN_TOOL:
            tool = str(attrs.get("gen_ai.tool.name", ""))
            error_type = str(attrs.get("error.type", "tool_error"))
            TOOL_CALLS.labels(tool, span.status).inc()
            if span.status == "error":
                TOOL_FAILURES.labels(tool, error_type).inc()
            server = attrs.get("claw.mcp.server")
            if server:
                MCP_CALLS.labels(str(server), span.status).inc()
                if span.status == "error" and error_type in MCP_REJECTION_TYPES:
                    MCP_REJECTIONS.labels(str(server), error_type).inc()


def count_budget_refusal(reason: str) -> None:
    """The cost guard refused an LLM call (agents.budgets.metrics)."""
    BUDGET_REFUSALS.labels(reason).inc()


def count_budget_alert(threshold: int) -> None:
    """A budget crossed an alert threshold (agents.budgets.metrics)."""
    BUDGET_ALERTS.labels(str(threshold)).inc()


def count_mcp_call(server: str, status: str = "ok") -> None:
    MCP_CALLS.labels(server, status).inc()


def count_mcp_rejection(server: str, reason: str) -> None:
    MCP_REJECTIONS.labels(server, reason).inc()
