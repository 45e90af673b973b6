from __future__ import annotations

import pytest

from tools_app.mcp.resilience import reset_server_limits
from tools_app.mcp.toolset import forget_tool_lists
from tools_app.runtime.config import invalidate


@pytest.fixture(autouse=True)
def _fresh_extension_caches():
    """Process-wide caches (configuration, MCP tool lists and limits) start empty:
    ids are reused between tests once the database is flushed."""
    invalidate()
    forget_tool_lists()
    reset_server_limits()
    yield
    invalidate()
    forget_tool_lists()
    reset_server_limits()
