"""web_search (T3): search the web through a pluggable backend (``search_backends``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from agents.engine.interfaces import READ_ONLY, RunContext
from tools_app.guards.ssrf import BlockedDestination
from tools_app.net.fetch import TooManyRedirects
from tools_app.registry import SSRF_BLOCKED, TIMEOUT, TOOL_ERROR, Tool, ToolError
from tools_app.web.search_backends import SearchBackend, SearchBackendError

MAX_SNIPPET_CHARS = 400

BackendProvider = Callable[[], SearchBackend | None]


class WebSearchTool(Tool):
    name = "web_search"
    description = "Search the web. Returns titles, URLs and snippets; read a page with web_fetch."
    input_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "count": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many results (5)."},
            "language": {"type": "string", "maxLength": 10, "description": "e.g. en, fr (optional)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 30.0

    def __init__(self, backend_for: BackendProvider) -> None:
        self.backend_for = backend_for

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        backend = self.backend_for()
        if backend is None:
            raise ToolError(TOOL_ERROR, "Web search is not configured on this installation.")
        query = str(args["query"]).strip()
        try:
            results = await backend.search(
                query, count=int(args.get("count") or 5), language=args.get("language")
            )
        except BlockedDestination as exc:
            raise ToolError(SSRF_BLOCKED, exc.message) from None
        except httpx.TimeoutException:
            raise ToolError(TIMEOUT, "The search service did not answer in time.") from None
        except (httpx.HTTPError, TooManyRedirects, SearchBackendError) as exc:
            raise ToolError(TOOL_ERROR, f"Web search failed: {exc}") from None
        if not results:
            return f"No results for {query!r}."
        lines = [f"Results for {query!r} ({backend.name}):"]
        for number, result in enumerate(results, 1):
            snippet = " ".join(result.snippet.split())[:MAX_SNIPPET_CHARS]
            lines.append(
                f"{number}. {result.title}\n   {result.url}" + (f"\n   {snippet}" if snippet else "")
            )
        return "\n".join(lines)
