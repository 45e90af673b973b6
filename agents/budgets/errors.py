"""The refusal a budget, a call rate or a kill switch gives an LLM call.

It is a ``ProviderError`` so every caller already handles it: the loop ends the run
as failed with this readable message, a light call (title, summary) gives up."""

from __future__ import annotations

from datetime import datetime

from agents.engine.types import ProviderError

BUDGET_EXCEEDED = "budget_exceeded"
RATE_EXCEEDED = "call_rate_exceeded"
UNPRICED_MODEL = "unpriced_model"
LLM_STOPPED = "llm_calls_stopped"


class BudgetRefused(ProviderError):
    """``code`` is one of budget_exceeded, call_rate_exceeded, unpriced_model,
    llm_calls_stopped; ``budget_id`` and ``reset_at`` name the limit that refused."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        budget_id: int | None = None,
        reset_at: datetime | None = None,
    ) -> None:
        super().__init__(code, message, retryable=False)
        self.code = code
        self.budget_id = budget_id
        self.reset_at = reset_at

    def __str__(self) -> str:
        return self.message

    def as_fields(self) -> dict[str, object]:
        return {
            "budget": self.budget_id,
            "resets_at": self.reset_at.isoformat() if self.reset_at else None,
        }
