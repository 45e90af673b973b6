"""Hooks the observability stream counts from (prometheus counters live there).

``on_refusal`` / ``on_alert`` take a callable each; without one they do nothing."""

from __future__ import annotations

from collections.abc import Callable

_refusal_hooks: list[Callable[[str, int], None]] = []
_alert_hooks: list[Callable[[int, int], None]] = []


def on_refusal(hook: Callable[[str, int], None]) -> None:
    """``hook(code, tenant_id)`` is called for every refused LLM call."""
    _refusal_hooks.append(hook)


def on_alert(hook: Callable[[int, int], None]) -> None:
    """``hook(tenant_id, threshold)`` is called for every threshold alert."""
    _alert_hooks.append(hook)


def count_budget_refusal(code: str, tenant_id: int) -> None:
    for hook in _refusal_hooks:
        hook(code, tenant_id)


def count_budget_alert(tenant_id: int, threshold: int) -> None:
    for hook in _alert_hooks:
        hook(tenant_id, threshold)
