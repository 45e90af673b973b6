"""Who an LLM call is charged to: a ContextVar set where a run (or a one-off call)
begins, read by the provider wrapper at every call.

Asyncio tasks copy the context they start in, so a sub-agent started by a run's tool
carries the parent's charge (plus its own agent): the parent's budgets pay for it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Charge:
    tenant_id: int
    user_id: int | None = None
    agent_ids: tuple[int, ...] = ()
    api_key_id: int | None = None
    routine_id: int | None = None
    run_id: str = ""

    def with_agent(self, agent_id: int) -> Charge:
        """The charge of a sub-agent of this run: its agent's budgets and all of ours."""
        if agent_id in self.agent_ids:
            return self
        return replace(self, agent_ids=(*self.agent_ids, agent_id))


_charge: ContextVar[Charge | None] = ContextVar("claw_budget_charge", default=None)


def current_charge() -> Charge | None:
    return _charge.get()


@contextlib.contextmanager
def charging(charge: Charge | None) -> Iterator[None]:
    token = _charge.set(charge)
    try:
        yield
    finally:
        _charge.reset(token)


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value not in (None, "") else None
    except ValueError:
        return None


def charge_for_run(
    *,
    tenant_id: object,
    user_id: object = None,
    agent_id: object = None,
    run_id: object = "",
    api_key_id: object = None,
    routine_id: object = None,
) -> Charge:
    """A charge from the loose ids the runtime holds (strings or ints)."""
    parent = current_charge()
    agent = _int(agent_id)
    base = Charge(
        tenant_id=int(str(tenant_id)),
        user_id=_int(user_id),
        agent_ids=(agent,) if agent is not None else (),
        api_key_id=_int(api_key_id),
        routine_id=_int(routine_id),
        run_id=str(run_id or ""),
    )
    if parent is not None and parent.tenant_id == base.tenant_id:
        # A run started inside another's charge (a sub-agent): both pay.
        merged = parent
        for a in base.agent_ids:
            merged = merged.with_agent(a)
        return merged
    return base


_ORIGIN_SQL = """
SELECT r.api_key_id, (SELECT rr.routine_id FROM agents_routinerun rr WHERE rr.run_id = r.id LIMIT 1)
FROM agents_run r WHERE r.id = %s
"""


def run_origin(run_id: object) -> tuple[int | None, int | None]:
    """The API key that started run ``run_id`` and the routine that fired it (O1):
    one statement, when the run starts."""
    from django.db import connection

    run = _int(run_id)
    if run is None:
        return None, None
    with connection.cursor() as cursor:
        cursor.execute(_ORIGIN_SQL, [run])
        row = cursor.fetchone()
    return (row[0], row[1]) if row else (None, None)
