"""A tenant's admin-defined HTTP tools as a tool set (T11).

Each call: the arguments (already validated against the tool's schema) fill the URL
template, the others go in the query string (GET, DELETE) or a JSON body (POST, PUT,
PATCH); the request goes through the SSRF guard with the tenant's allow-list, with the
tool's headers (decrypted only here) sent to the admin's host alone -- a redirect to
another origin loses them; the answer is cut at the tool's size cap. One HTTP client
serves all of a run's calls and is closed with the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from tools_app.guards.ssrf import BlockedDestination, SsrfGuard
from tools_app.http_tools.templates import TemplateError, expand_url_template, template_placeholders
from tools_app.net.fetch import TooManyRedirects, describe_network_error, guarded_request
from tools_app.net.transports import guarded_client
from tools_app.registry import (
    ACCOUNT_NOT_CONNECTED,
    INVALID_ARGUMENTS,
    SSRF_BLOCKED,
    TIMEOUT,
    TOOL_ERROR,
    Tool,
    ToolError,
    ToolOutput,
)

if TYPE_CHECKING:
    from tools_app.models.user_tokens import UserTokenSlot

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True, slots=True)
class HttpToolSpec:
    """One HttpTool row as plain data."""

    id: int
    tenant_id: int
    name: str
    description: str
    input_schema: Mapping[str, Any]
    method: str
    url_template: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 30.0
    max_response_bytes: int = 100_000
    agent_ids: frozenset[int] | None = None
    # Per-user tokens (tools_app.runtime.user_tokens).
    user_token: UserTokenSlot | None = None
    user_token_hint: str = ""
    user_token_missing: bool = False
    user_scope: str = ""

    def applies_to(self, agent_id: int) -> bool:
        return self.agent_ids is None or agent_id in self.agent_ids


class _RunClient:
    """The run's HTTP client for these tools, opened on first use."""

    def __init__(self, guard: SsrfGuard) -> None:
        self.guard = guard
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = guarded_client(self.guard, timeout=300)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class HttpTool(Tool):
    def __init__(self, spec: HttpToolSpec, client: _RunClient) -> None:
        self.spec = spec
        self.client = client
        self.name = spec.name
        self.description = spec.description
        self.input_schema = dict(spec.input_schema)
        self.timeout = float(spec.timeout)
        self.traits = READ_ONLY if spec.method == "GET" else ToolTraits(risk="medium")
        self.placeholders = frozenset(template_placeholders(spec.url_template))

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str | ToolOutput:
        spec = self.spec
        if spec.user_token_missing:
            from tools_app.runtime.user_tokens import account_missing_message

            raise ToolError(
                ACCOUNT_NOT_CONNECTED, account_missing_message("tool", spec.name, spec.user_token_hint)
            )
        try:
            url = expand_url_template(spec.url_template, args)
        except TemplateError as exc:
            raise ToolError(INVALID_ARGUMENTS, f"{spec.name}: {exc}.") from None
        rest = {k: v for k, v in args.items() if k not in self.placeholders and v is not None}
        body: bytes | None = None
        headers = dict(spec.headers)
        if spec.method in BODY_METHODS:
            body = json.dumps(rest, ensure_ascii=False).encode()
            headers.setdefault("Content-Type", "application/json")
        elif rest:
            url = str(httpx.URL(url).copy_merge_params({k: _query_value(v) for k, v in rest.items()}))
        try:
            response = await guarded_request(
                self.client.get(),
                self.client.guard,
                spec.method,
                url,
                headers=headers,
                content=body,
                max_bytes=spec.max_response_bytes,
                origin_bound_headers=spec.headers.keys(),
            )
        except BlockedDestination as exc:
            raise ToolError(SSRF_BLOCKED, exc.message) from None
        except httpx.TimeoutException:
            raise ToolError(TIMEOUT, f"{spec.name}: the request timed out.") from None
        except (httpx.HTTPError, TooManyRedirects) as exc:
            raise ToolError(TOOL_ERROR, describe_network_error(exc, what=spec.name)) from None
        text = f"HTTP {response.status}\n{response.text()}"
        if response.truncated:
            text += f"\n[response cut at {spec.max_response_bytes} bytes]"
        if response.status >= 400:
            return ToolOutput(text, is_error=True, error_type=TOOL_ERROR)
        return text


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return [_query_value(v) for v in value]
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return value


class HttpToolSet:
    """The HTTP tools one run may use."""

    name = "http_tools"

    def __init__(self, specs: Sequence[HttpToolSpec], guard: SsrfGuard) -> None:
        self._client = _RunClient(guard)
        self._tools: list[Tool] = [HttpTool(spec, self._client) for spec in specs]

    def tools(self) -> Sequence[Tool]:
        return self._tools

    async def aclose(self) -> None:
        await self._client.aclose()
