from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.runtime.worker import shutdown_supervisor


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    """Tests that drive runs get a fresh worker loop, stopped afterwards."""
    yield
    shutdown_supervisor()
