"""Web tools (T3): web_fetch and web_search, registered with the built-ins by
``ToolsAppConfig.ready()`` (see :func:`register_web_tools`)."""

from __future__ import annotations

from django.conf import settings

from tools_app.registry import Registry
from tools_app.runtime.network import tenant_guard
from tools_app.web.fetch_tool import WebFetchTool
from tools_app.web.search_backends import SearchBackend, SearxngBackend
from tools_app.web.search_tool import WebSearchTool


def configured_search_backend() -> SearchBackend | None:
    """The operator's backend (``CLAW_WEB_SEARCH_URL``), read at each call so a settings
    change (or a test's override) applies at once."""
    url = settings.CLAW_WEB_SEARCH_URL
    return SearxngBackend(url) if url else None


WEB_FETCH = WebFetchTool(tenant_guard)
WEB_SEARCH = WebSearchTool(configured_search_backend)


def register_web_tools(registry: Registry) -> None:
    registry.register(WEB_FETCH)
    registry.register(WEB_SEARCH)
