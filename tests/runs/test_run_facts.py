"""A run's set-up reads its facts with its session and turn (``agents.runtime.run_facts``):
with warm caches it asks the database nothing else for them, and a change between two
runs -- the agent's configuration, the member's role, an "always" grant -- applies to
the next run."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agents.actions.config import do_save_agent_file
from agents.runtime.worker import execute_run
from claw_platform.tenancy.models import Membership
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.runs import tools as test_tools
from tests.runs.helpers import new_session
from tests.runs.test_runs import send
from tools_app.models import ToolApprovalGrant

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = "tests.runs.tools.recording_tools"  # with the other test-only factories


@pytest.fixture
def statements(monkeypatch):
    """Every statement run on a sync psycopg cursor, from any thread."""
    seen: list[str] = []
    real = psycopg.Cursor.execute

    def execute(self, query, params=None, **kwargs):
        seen.append(query if isinstance(query, str) else str(query))
        return real(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return seen


def run_once(
    ts, fake_llm, session=None, *, before_run: list[str] | None = None, sender: Any = "member"
) -> Any:
    """Send a message (as the member, or ``sender``) and run it; ``before_run`` is
    emptied in between."""
    fake_llm.script(FakeTurn(text="ok"))
    run = send(session or new_session(ts), "hi", ts.member if sender == "member" else sender)
    if before_run is not None:
        before_run.clear()
    assert execute_run(run.pk, wait=True) == "completed"
    return test_tools.built[-1]


def test_with_warm_caches_the_set_up_reads_its_facts_only_with_the_session(
    live_agent, fake_llm, settings, statements
):
    settings.CLAW_RUN_TOOLS_FACTORY = TOOLS
    run_once(live_agent, fake_llm)  # warms the agent's and the extensions' caches
    run_once(live_agent, fake_llm, before_run=statements)
    reading = [s for s in statements if "tools_app_toolapprovalgrant" in s or "tenancy_membership" in s]
    assert [("agents_session s" in s) for s in reading] == [True]
    assert not [s for s in statements if "FROM agents_agent WHERE" in s]
    assert not [s for s in statements if "FROM tools_app_extensionsversion WHERE" in s]


def test_a_change_between_runs_applies_to_the_next_run(live_agent, fake_llm, settings):
    settings.CLAW_RUN_TOOLS_FACTORY = TOOLS
    session = new_session(live_agent)
    first = run_once(live_agent, fake_llm, session)
    assert (first.role, first.approval.grants) == ("member", frozenset())

    # The member becomes an admin, gets an "always" grant, and the agent a new soul.
    Membership.objects.unscoped().filter(tenant=live_agent.tenant, user=live_agent.member).update(
        role="admin"
    )
    ToolApprovalGrant.objects.unscoped().create(
        tenant=live_agent.tenant, session=session, tool_name="http_get", arguments_digest="d" * 64
    )
    do_save_agent_file(live_agent.agent, "SOUL.md", "You are a changed assistant.")

    second = run_once(live_agent, fake_llm, session)
    assert (second.role, second.approval.grants) == ("admin", frozenset({("http_get", "d" * 64)}))
    assert "You are a changed assistant." in fake_llm.requests[-1].json["messages"][0]["content"]


def test_a_run_for_no_user_acts_as_a_member(live_agent, fake_llm, settings):
    from agents.actions.conversation import do_create_session

    settings.CLAW_RUN_TOOLS_FACTORY = TOOLS
    session = do_create_session(live_agent.agent, user=None, title="routine")
    # Sent by the system (as a routine is): a member cannot write to a chat not theirs.
    assert run_once(live_agent, fake_llm, session, sender=None).role == "member"
