from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.runtime.worker import shutdown_supervisor
from tests.agents.conftest import live_agent  # noqa: F401  (shared fixture)


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    """Tests that drive runs get a fresh worker loop, stopped afterwards."""
    yield
    shutdown_supervisor()
