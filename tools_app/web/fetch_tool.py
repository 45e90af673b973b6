"""web_fetch (T3): read a web page as text.

The URL goes through the SSRF guard with the tenant's allow-list (checked at connect
time, pinned, every redirect re-checked). The download is capped in size and time;
HTML becomes readable text with inscriptis (layout-aware: headings, lists, tables);
JSON and other text types are returned as they are; anything else is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from inscriptis import get_text
from inscriptis.css_profiles import CSS_PROFILES
from inscriptis.model.config import ParserConfig

from agents.engine.interfaces import READ_ONLY, RunContext
from tools_app.guards.ssrf import BlockedDestination, SsrfGuard
from tools_app.net.fetch import TooManyRedirects, describe_network_error, guarded_request
from tools_app.net.transports import guarded_client
from tools_app.registry import SSRF_BLOCKED, TIMEOUT, TOOL_ERROR, Tool, ToolError

MAX_DOWNLOAD_BYTES = 2_000_000
DEFAULT_MAX_CHARS = 20_000
FETCH_TIMEOUT_SECONDS = 20.0
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/ld+json")
HTML_TYPES = ("text/html", "application/xhtml+xml")
_HTML_CONFIG = ParserConfig(css=CSS_PROFILES["strict"], display_links=False)

GuardProvider = Callable[[RunContext], Awaitable[SsrfGuard]]


def html_to_text(html: str) -> str:
    """Readable text of an HTML document (scripts and styles dropped)."""
    text = get_text(html, _HTML_CONFIG)
    lines = [line.rstrip() for line in text.splitlines()]
    compact: list[str] = []
    for line in lines:
        if line or (compact and compact[-1]):
            compact.append(line)
    return "\n".join(compact).strip()


class WebFetchTool(Tool):
    name = "web_fetch"
    description = (
        "Fetch a web page (http or https URL) and return its text. HTML is converted to "
        "plain text; JSON and text are returned as they are. Large pages are cut."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 8, "maxLength": 4000, "description": "The http(s) URL."},
            "max_chars": {
                "type": "integer",
                "minimum": 500,
                "maximum": 100_000,
                "description": "Cut the text here.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = FETCH_TIMEOUT_SECONDS + 5
    max_output_chars = 100_500

    def __init__(self, guard_for: GuardProvider) -> None:
        self.guard_for = guard_for

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        url = str(args["url"]).strip()
        max_chars = int(args.get("max_chars") or DEFAULT_MAX_CHARS)
        guard = await self.guard_for(ctx)
        try:
            async with guarded_client(guard, timeout=FETCH_TIMEOUT_SECONDS) as client:
                response = await guarded_request(
                    client,
                    guard,
                    "GET",
                    url,
                    headers={
                        "User-Agent": "ClawPlatform-WebFetch/1",
                        "Accept": "text/html,application/json,text/*;q=0.8",
                    },
                    max_bytes=MAX_DOWNLOAD_BYTES,
                )
        except BlockedDestination as exc:
            raise ToolError(SSRF_BLOCKED, exc.message) from None
        except httpx.TimeoutException:
            raise ToolError(TIMEOUT, f"Fetching {url} timed out after {FETCH_TIMEOUT_SECONDS:g} s.") from None
        except (httpx.HTTPError, TooManyRedirects) as exc:
            raise ToolError(TOOL_ERROR, describe_network_error(exc, what=f"Fetching {url}")) from None
        content_type = response.content_type
        if content_type and not content_type.startswith(TEXT_TYPES):
            raise ToolError(
                TOOL_ERROR, f"{url} is {content_type}, not a text page; web_fetch reads text only."
            )
        raw = response.text()
        text = (
            html_to_text(raw)
            if content_type in HTML_TYPES or (not content_type and "<html" in raw[:1000].lower())
            else raw
        )
        header = f"URL: {response.url}\nStatus: {response.status}\n"
        notes = []
        if response.truncated:
            notes.append(f"[download stopped at {MAX_DOWNLOAD_BYTES} bytes]")
        if len(text) > max_chars:
            notes.append(f"[text cut at {max_chars} of {len(text)} characters]")
            text = text[:max_chars]
        result = header + "\n" + text
        if notes:
            result += "\n" + " ".join(notes)
        if response.status >= 400:
            raise ToolError(TOOL_ERROR, f"{url} answered HTTP {response.status}.\n{result[:2000]}")
        return result
