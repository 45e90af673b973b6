""" "Test connection" for a provider (issue 26 item 9): ask its model list, through the
tenant's SSRF guard, and say in plain words whether it answered -- never with the key.

Anthropic: ``GET {base}/v1/models`` with ``x-api-key``; OpenAI-compatible:
``GET {base}/models`` with a bearer token. The body read is capped; a 200 with a
``data`` list counts its models. Addresses the guard refuses (loopback, private
networks) are reachable only when the tenant's allowed hosts list them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from agents.providers.headers import headers_problem
from tools_app.guards.ssrf import BlockedDestination, SsrfGuard
from tools_app.net.fetch import TooManyRedirects, guarded_request
from tools_app.net.transports import guarded_client

MAX_BODY_BYTES = 256_000
TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ConnectionResult:
    ok: bool
    message: str


def models_url(kind: str, base_url: str) -> str:
    base = base_url.rstrip("/")
    return f"{base}/v1/models" if kind == "anthropic" else f"{base}/models"


def shown_url(url: str) -> str:
    """The URL without user info or query (where a credential could hide)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _headers(kind: str, api_key: str, extra: dict[str, str]) -> dict[str, str]:
    headers = {"user-agent": "claw-platform", **extra}
    if kind == "anthropic":
        headers.update({"x-api-key": api_key, "anthropic-version": "2023-06-01"})
    elif api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


_STATUS_TEXT = {
    401: "The provider refused the API key (HTTP 401): check the key.",
    403: "The provider refused access (HTTP 403): the key may lack permission for the model list.",
    404: "No model list at {url} (HTTP 404): check the base URL (OpenAI-compatible URLs usually end in /v1).",
    429: "The provider is rate-limiting us (HTTP 429); try again in a moment.",
}


async def check_provider_connection(
    *, kind: str, base_url: str, api_key: str, extra_headers: dict[str, Any], guard: SsrfGuard
) -> ConnectionResult:
    url = models_url(kind, base_url)
    shown = shown_url(url)
    problem = headers_problem(extra_headers or {})
    if problem:
        return ConnectionResult(False, f"The extra headers cannot be sent: {problem}.")
    headers = _headers(kind, api_key or "", {str(k): str(v) for k, v in (extra_headers or {}).items()})
    try:
        async with guarded_client(guard, timeout=TIMEOUT_SECONDS) as client:
            response = await guarded_request(
                client,
                guard,
                "GET",
                url,
                headers=headers,
                max_bytes=MAX_BODY_BYTES,
                origin_bound_headers=list(headers),
            )
    except BlockedDestination as exc:
        return ConnectionResult(
            False, f"{exc.message} To reach it, add the host to the tenant's allowed hosts."
        )
    except TooManyRedirects:
        return ConnectionResult(False, f"{shown} redirected too many times.")
    except httpx.TimeoutException:
        return ConnectionResult(False, f"{shown} did not answer within {TIMEOUT_SECONDS:g} s.")
    except httpx.HTTPError as exc:
        return ConnectionResult(False, f"Could not connect to {shown} ({type(exc).__name__}).")
    if response.status in _STATUS_TEXT:
        return ConnectionResult(False, _STATUS_TEXT[response.status].format(url=shown))
    if response.status >= 500:
        return ConnectionResult(False, f"The provider failed (HTTP {response.status}); try again later.")
    if response.status >= 300:
        return ConnectionResult(False, f"Unexpected answer from {shown} (HTTP {response.status}).")
    try:
        data = json.loads(response.body) if not response.truncated else None
    except ValueError:
        data = None
    models = data.get("data") if isinstance(data, dict) else None
    if isinstance(models, list):
        return ConnectionResult(True, f"Connected: {shown} answered and lists {len(models)} models.")
    return ConnectionResult(True, f"Connected: {shown} answered (HTTP {response.status}).")
