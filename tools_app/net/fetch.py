"""One guarded HTTP exchange: redirects followed by hand, each hop re-checked; body capped.

Used by web_fetch, HTTP tools and webhook hooks. The client must come from
``tools_app.net.transports.guarded_client`` so that every connection -- the first and
every redirect's -- is checked and pinned at connect time; :func:`guarded_request`
adds the early URL check (clear errors for schemes and address literals), a redirect
limit, and drops the caller's own headers (credentials) when a redirect leaves the
origin they were meant for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import httpx

from tools_app.guards.ssrf import BlockedDestination, SsrfGuard

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class TooManyRedirects(Exception):
    pass


@dataclass(frozen=True, slots=True)
class FetchedResponse:
    status: int
    url: str
    headers: httpx.Headers
    body: bytes
    truncated: bool
    redirects: int

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def charset(self) -> str:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip("\"' ")
        return "utf-8"

    def text(self) -> str:
        try:
            return self.body.decode(self.charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


async def guarded_request(
    client: httpx.AsyncClient,
    guard: SsrfGuard,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
    max_bytes: int,
    max_redirects: int = MAX_REDIRECTS,
    origin_bound_headers: Iterable[str] = (),
) -> FetchedResponse:
    """Send ``method url`` and read at most ``max_bytes`` of the body.

    Redirects (301/302/303/307/308) are followed by hand up to ``max_redirects``:
    each target URL is checked before it is requested and its connection is checked
    at connect time. 303, and 301/302 after a POST, continue as a body-less GET.
    ``origin_bound_headers`` (and ``Authorization``/``Cookie``) are sent only to the
    first URL's origin. Raises :class:`BlockedDestination`, :class:`TooManyRedirects`
    or ``httpx.HTTPError``.
    """
    guard.check_url(url)
    current = httpx.URL(url)
    first_origin = _origin(current)
    bound = {h.lower() for h in origin_bound_headers} | {"authorization", "cookie", "proxy-authorization"}
    send_headers = dict(headers or {})
    body = content
    for hop in range(max_redirects + 1):
        if _origin(current) != first_origin:
            send_headers = {k: v for k, v in send_headers.items() if k.lower() not in bound}
        request = client.build_request(method, current, headers=send_headers, content=body)
        response = await client.send(request, stream=True)
        try:
            location = response.headers.get("location")
            if response.status_code in REDIRECT_STATUSES and location:
                if hop == max_redirects:
                    raise TooManyRedirects(f"more than {max_redirects} redirects")
                target = current.join(location)
                guard.check_url(str(target))
                if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                    method, body = "GET", None
                    send_headers = {k: v for k, v in send_headers.items() if k.lower() != "content-type"}
                current = target
                continue
            data, truncated = await _read_capped(response, max_bytes)
            return FetchedResponse(response.status_code, str(current), response.headers, data, truncated, hop)
        finally:
            await response.aclose()
    raise TooManyRedirects(f"more than {max_redirects} redirects")  # pragma: no cover - loop always returns


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def describe_network_error(exc: BaseException, *, what: str) -> str:
    """A message for the model: what failed, without internals (X5)."""
    if isinstance(exc, BlockedDestination):
        return exc.message
    if isinstance(exc, TooManyRedirects):
        return f"{what} failed: {exc}."
    if isinstance(exc, httpx.TimeoutException):
        return f"{what} timed out."
    if isinstance(exc, httpx.HTTPError):
        return f"{what} failed: could not connect or the connection broke ({type(exc).__name__})."
    return f"{what} failed ({type(exc).__name__})."


__all__ = [
    "FetchedResponse",
    "TooManyRedirects",
    "describe_network_error",
    "guarded_request",
]
