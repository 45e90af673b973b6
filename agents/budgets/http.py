"""How a budget refusal answers over HTTP: 402 in the API's one error shape, or in
OpenAI's error format (type ``insufficient_quota``; not 429, which clients retry)."""

from __future__ import annotations

from typing import Any

from agents.budgets.errors import BudgetRefused
from agents.budgets.guard import check_budget_open
from agents.budgets.scope import Charge

PAYMENT_REQUIRED = 402


def session_charge(session: Any, *, api_key_id: int | None = None) -> Charge:
    return Charge(
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        agent_ids=(session.agent_id,) if session.agent_id else (),
        api_key_id=api_key_id,
    )


def refuse_if_over_budget_api(charge: Charge) -> None:
    """Raise the API's 402 ``ApiError`` when the call would be refused."""
    from claw_platform.api.errors import ApiError

    try:
        check_budget_open(charge)
    except BudgetRefused as refused:
        raise ApiError(PAYMENT_REQUIRED, refused.code, refused.message, refused.as_fields()) from None


def refuse_if_over_budget_openai(charge: Charge) -> None:
    """Raise OpenAI's 402 ``insufficient_quota`` error when the call would be refused."""
    from claw_platform.api.openai.wire import WireError

    try:
        check_budget_open(charge)
    except BudgetRefused as refused:
        raise WireError(
            refused.message, None, status=PAYMENT_REQUIRED, code=refused.code, error_type="insufficient_quota"
        ) from None
