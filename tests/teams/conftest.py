from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents.actions.config import do_create_agent
from agents.actions.teams import do_add_delegation
from agents.models import Agent, AgentDelegation
from agents.runtime.worker import shutdown_supervisor
from tools_app.runtime.config import invalidate


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    """Tests that drive runs get a fresh worker loop, stopped afterwards."""
    invalidate()
    yield
    shutdown_supervisor()
    invalidate()


def make_agent(ts: Any, slug: str, name: str, **fields: Any) -> Agent:
    return do_create_agent(
        ts.tenant, slug=slug, name=name, model=ts.model, files={"SOUL.md": f"You are {name}."}, **fields
    )


def link(agent: Agent, target: Agent, mode: str = "both", description: str = "") -> AgentDelegation:
    return do_add_delegation(agent, target, mode=mode, description=description)
