"""web_search backends (T3). A backend turns a query into results; the tool formats them.

:class:`SearxngBackend` asks a SearXNG instance's JSON API (``/search?q=...&format=json``;
the instance must have the json format enabled). The instance is the operator's
(``CLAW_WEB_SEARCH_URL``), so its host is allowed through the SSRF guard by that setting
alone -- a redirect elsewhere is checked like any other connection. Other backends
implement :class:`SearchBackend`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from tools_app.guards.ssrf import AllowList, SsrfGuard
from tools_app.net.fetch import guarded_request
from tools_app.net.transports import guarded_client

MAX_RESPONSE_BYTES = 2_000_000


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str


class SearchBackendError(Exception):
    pass


class SearchBackend(Protocol):
    name: str

    async def search(self, query: str, *, count: int, language: str | None = None) -> list[SearchResult]: ...


class SearxngBackend:
    name = "searxng"

    def __init__(self, base_url: str, *, timeout: float = 15.0, guard: SsrfGuard | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        parts = urlsplit(self.base_url)
        self.guard = guard or SsrfGuard(AllowList.of([(parts.hostname or "", parts.port)]))

    async def search(self, query: str, *, count: int, language: str | None = None) -> list[SearchResult]:
        params = {"q": query, "format": "json", "safesearch": "1"}
        if language:
            params["language"] = language
        url = str(httpx.URL(self.base_url + "/search").copy_merge_params(params))
        async with guarded_client(self.guard, timeout=self.timeout) as client:
            response = await guarded_request(
                client,
                self.guard,
                "GET",
                url,
                headers={"Accept": "application/json"},
                max_bytes=MAX_RESPONSE_BYTES,
            )
        if response.status != 200:
            raise SearchBackendError(f"the search service answered HTTP {response.status}")
        try:
            data = json.loads(response.body)
        except ValueError:
            raise SearchBackendError(
                "the search service did not answer JSON (is its json format enabled?)"
            ) from None
        results = []
        for item in data.get("results", []) if isinstance(data, dict) else []:
            if not isinstance(item, dict) or not item.get("url"):
                continue
            results.append(
                SearchResult(
                    str(item.get("title") or item["url"]), str(item["url"]), str(item.get("content") or "")
                )
            )
            if len(results) >= count:
                break
        return results
