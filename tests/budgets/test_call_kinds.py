"""Over budget, the calls the routines make are refused too, and no LLM request goes
out: a heartbeat, and a routine's run (the chat, REST, webhook, /v1/ and a run that
runs out mid-way are in test_api.py)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync

from agents.actions.config import do_save_agent_file
from agents.actions.conversation import do_create_session
from agents.budgets.models import Budget
from agents.models import RoutineRun
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from claw_platform.api.live import settle_run
from tests.routines.helpers import make_routine, tick

pytestmark = pytest.mark.django_db(transaction=True)


def spent_budget(ts) -> Budget:
    return Budget.objects.unscoped().create(
        tenant=ts.tenant, name="Spent", limit=Decimal("0.01"), spent=Decimal("0.01"), period="none"
    )


def model_requests(fake_llm) -> int:
    return len([r for r in fake_llm.requests if r.json.get("messages")])


def test_a_heartbeat_over_budget_is_refused_without_a_request(live_agent, fake_llm):
    spent_budget(live_agent)
    session = do_create_session(live_agent.agent, user=live_agent.member, title="hb")
    do_save_agent_file(
        live_agent.agent, "HEARTBEAT.md", "- check that the backups ran", user=live_agent.member
    )

    async def beat():
        try:
            return await handle_message(session.pk, "/heartbeat")
        finally:
            await close_providers()

    reply = asyncio.run(beat())
    assert "'Spent'" in reply.text, reply.text
    assert "Traceback" not in reply.text
    assert model_requests(fake_llm) == 0


def test_a_routines_run_over_budget_fails_naming_the_budget_without_a_request(
    live_agent, inline_runs, fake_llm
):
    spent_budget(live_agent)
    now = datetime.now(UTC)
    routine = make_routine(live_agent, next_run_at=now, name="Digest")
    tick(now)
    row = RoutineRun._base_manager.get(routine=routine)
    assert row.run_id is not None
    settled = async_to_sync(settle_run)(row.run_id, deadline=time.monotonic() + 30)
    assert settled is not None
    assert settled.status == "failed"
    assert "'Spent'" in settled.error
    assert model_requests(fake_llm) == 0
