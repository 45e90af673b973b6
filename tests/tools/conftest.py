from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.runtime.worker import shutdown_supervisor
from tools_app.mcp.resilience import reset_server_limits
from tools_app.mcp.toolset import forget_tool_lists
from tools_app.runtime.config import invalidate


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    """Tests that drive runs get a fresh worker loop, stopped afterwards."""
    yield
    shutdown_supervisor()


@pytest.fixture(autouse=True)
def _fresh_extension_caches() -> Iterator[None]:
    """Process-wide caches (configuration, MCP tool lists and limits) start empty:
    ids are reused between tests once the database is flushed."""
    invalidate()
    forget_tool_lists()
    reset_server_limits()
    yield
    invalidate()
    forget_tool_lists()
    reset_server_limits()
