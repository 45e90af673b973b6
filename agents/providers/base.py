"""Shared machinery for HTTP LLM providers: client, retries (P3), error mapping.

Only the vendor files (``anthropic.py``, ``openai_compat.py``) know a wire format.
This module knows HTTP: one long-lived ``httpx.AsyncClient`` per provider instance
(over aiohttp's connection pool, see ``DEFAULT_TRANSPORT``), timeouts, turning HTTP
and transport failures into :class:`ProviderError` with a readable message (never the
key), and :func:`with_retries`.

A call, streamed or not, goes::

    build body (vendor) -> POST with retries -> vendor events -> caller

Streaming retries stop at the first event handed to the caller: the attempt that is
retried is "send the request and read up to the first normalised event", so a stream
that has shown the user anything is never replayed.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import functools
import json
import logging
import random
import re
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeVar

import httpx
import orjson
from httpx_sse import ServerSentEvent, SSEError, aconnect_sse

from agents.engine.types import LLMRequest, LLMResponse, ProviderError, ProviderEvent
from agents.providers.accumulate import StreamAccumulator
from agents.providers.headers import headers_problem
from agents.providers.read_deadline import ReadDeadline
from agents.providers.sse_source import sse_events as sse_events_of

logger = logging.getLogger(__name__)

T = TypeVar("T")

Transport = Literal["aiohttp", "httpx"]

# httpx's own connection pool (httpcore) burns CPU with hundreds of concurrent streams
# (encode/httpx#3215): bench/engine/provider_stream.py, 500 concurrent streams with 1.5 s
# latency, gave ~30-40 calls/s and ~20 ms CPU per call with it, ~12 calls/s once the
# connections were kept alive, against ~240-260 calls/s and ~1 ms CPU per call over
# aiohttp's pool. The httpx API stays (httpx-sse, timeouts, errors); the transport
# under it comes from httpx-aiohttp (by an httpx maintainer).
try:
    import aiohttp
    import httpx_aiohttp
except ImportError:  # pragma: no cover - the dependency is declared; stay usable without
    aiohttp = None  # type: ignore[assignment]
    httpx_aiohttp = None  # type: ignore[assignment]

DEFAULT_TRANSPORT: Transport = "aiohttp" if httpx_aiohttp is not None else "httpx"
_AIOHTTP_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError,) if aiohttp is not None else ()
_DRAIN_ERRORS: tuple[type[Exception], ...] = (TimeoutError, httpx.HTTPError, SSEError, *_AIOHTTP_ERRORS)

Sleep = Callable[[float], Awaitable[None]]

# Pool sized for hundreds of concurrent streams per provider (one worker process can
# run many agent runs at once, each holding a stream open for tens of seconds).
DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=500, keepalive_expiry=30.0)
DEFAULT_CONNECT_TIMEOUT = 10.0


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificate store every provider client verifies against, loaded once per
    process (httpx's default: certifi, or SSL_CERT_FILE / SSL_CERT_DIR). Each new
    client loaded it anew, ~50 ms of the run loop (every stream on it stalled) for a
    provider's first run on a loop."""
    return httpx.create_ssl_context()


# Backoff: full jitter, sleep = uniform(0, min(MAX_DELAY, BASE_DELAY * 2**attempt)).
BASE_DELAY = 1.0
MAX_DELAY = 30.0
# A Retry-After longer than this is not waited out inside a run: the error surfaces
# (with ``retry_after`` set) so the caller can fail the run or reschedule it.
MAX_RETRY_AFTER = 60.0

_VENDOR_TEXT_LIMIT = 500
# How long to wait for the end of a body after the final event (see _drain).
DRAIN_TIMEOUT = 2.0


async def retry_sleep(seconds: float) -> None:
    """The sleep between attempts. Module-level so tests can patch it."""
    await asyncio.sleep(seconds)


# ------------------------------------------------------------------------ retries


def backoff_delay(attempt: int, *, base: float = BASE_DELAY, cap: float = MAX_DELAY) -> float:
    """Full-jitter exponential backoff for retry number ``attempt`` (0-based)."""
    return random.uniform(0.0, min(cap, base * (2**attempt)))  # noqa: S311 - not crypto


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int = 3,
    sleep: Sleep | None = None,
    base_delay: float = BASE_DELAY,
    max_delay: float = MAX_DELAY,
    max_retry_after: float = MAX_RETRY_AFTER,
    provider: str = "",
) -> T:
    """Run ``attempt`` until it succeeds, retrying retryable :class:`ProviderError`.

    At most ``max_retries`` retries (so ``max_retries + 1`` attempts). The wait is the
    server's ``retry_after`` when it gave one, else full-jitter exponential backoff.
    A ``retry_after`` above ``max_retry_after`` is not waited out: the error is raised.
    Non-retryable errors and anything that is not a ``ProviderError`` propagate at once.
    """
    do_sleep = sleep if sleep is not None else retry_sleep
    retries = 0
    while True:
        try:
            return await attempt()
        except ProviderError as err:
            if not err.retryable or retries >= max_retries:
                raise
            if err.retry_after is not None:
                if err.retry_after > max_retry_after:
                    raise
                delay = max(0.0, err.retry_after)
            else:
                delay = backoff_delay(retries, base=base_delay, cap=max_delay)
            retries += 1
            logger.warning(
                "LLM call failed (%s: %s), retry %d/%d in %.2fs",
                err.kind,
                err.message,
                retries,
                max_retries,
                delay,
                extra={"provider": provider},
            )
            await do_sleep(delay)


# --------------------------------------------------------------------- error mapping


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``Retry-After`` seconds, or an HTTP-date."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def error_kind_for_status(status: int) -> tuple[str, bool]:
    """(kind, retryable) for an HTTP error status. Only 429, 529 and 5xx are retried."""
    if status == 429:
        return "rate_limited", True
    if status == 529:
        return "overloaded", True
    if status >= 500:
        return "server", True
    if status in (401, 403):
        return "auth", False
    if status == 404:
        return "not_found", False
    return "bad_request", False


_KIND_TEXT = {
    "rate_limited": "rate limited by the provider",
    "overloaded": "the provider is overloaded",
    "server": "the provider had a server error",
    "auth": "the provider rejected the credentials",
    "not_found": "the provider endpoint or model was not found",
    "bad_request": "the provider rejected the request",
}


def short_text(text: str, limit: int = _VENDOR_TEXT_LIMIT) -> str:
    """One line, at most ``limit`` characters: safe to put in a user-facing message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def merge_body(body: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Shallow-merge per-provider/model overrides last; a ``None`` value deletes a key
    (e.g. drop ``max_tokens`` for a model that wants ``max_completion_tokens``)."""
    merged = dict(body)
    for key, value in extra.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


async def _drain(events: AsyncIterator[ServerSentEvent]) -> None:
    """Read what follows the final event, so the connection returns to the pool.

    An unread body makes the client close the connection: every call would pay a new
    TCP (and TLS) handshake. The call is already complete, so a server that dawdles or
    breaks here only costs the connection, never the result.
    """
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT):
            async for _ in events:
                pass
    except _DRAIN_ERRORS:
        pass


# --------------------------------------------------------------------- the provider


def encode_body(body: Any) -> bytes:
    """A request body as JSON (UTF-8, compact), with orjson: a run's request carries
    the agent's tool schemas and its history (18 KB for the 26 built-in tools), which
    the standard library takes 140 us to encode and orjson 7. What orjson refuses (an
    integer beyond 64 bits) goes through the standard library, as httpx would send it;
    so does a lone surrogate (a tool's output can hold one), sent as U+FFFD: UTF-8 has
    no way to say it, and it must not fail the run."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return _LONE_SURROGATE.sub("\ufffd", text).encode()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class HttpProvider(abc.ABC):
    """Base for providers speaking JSON over HTTP with SSE streaming.

    Subclasses supply the vendor parts: :meth:`_url`, :meth:`_auth_headers`,
    :meth:`_build_body`, :meth:`_events_from_sse`, :meth:`_events_from_json` and
    optionally :meth:`_vendor_error`. Streaming and non-streaming both end in the
    same :class:`ProviderEvent` sequence, so :class:`StreamAccumulator` builds the
    same message from either.
    """

    kind: ClassVar[str] = "http"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        name: str = "",
        extra_headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        sleep: Sleep | None = None,
        limits: httpx.Limits | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name or self.kind
        self.max_retries = max_retries
        self._api_key = api_key
        self._extra_headers = dict(extra_headers or {})
        # Checked when saved too; a value stored before that check must still never
        # reach the wire (agents.providers.headers).
        self._extra_headers_problem = headers_problem(self._extra_headers)
        self._sleep = sleep
        # ``timeout`` bounds each read (the gap between stream chunks), not the whole
        # call: a long answer may legitimately stream for minutes.
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, DEFAULT_CONNECT_TIMEOUT))
        self._stream_timeout = httpx.Timeout(timeout, connect=self._timeout.connect, read=None)
        self._limits = limits or DEFAULT_LIMITS
        self.transport: Transport = transport or DEFAULT_TRANSPORT
        if self.transport == "aiohttp" and httpx_aiohttp is None:
            raise ValueError("transport 'aiohttp' needs the httpx-aiohttp package")
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        # Never show the key.
        return f"<{type(self).__name__} {self.name!r} {self.base_url}>"

    # -------------------------------------------------------------- public API

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        """Stream one call: deltas, then exactly one ``Completed``.

        Retries (P3) cover everything up to the first event handed to the caller;
        after that a failure raises :class:`ProviderError` (kind ``stream`` for a cut).
        """
        body = self._build_body(request, stream=True)

        async def open_stream() -> tuple[ProviderEvent, AsyncGenerator[ProviderEvent, None]]:
            events = self._stream_once(body)
            try:
                first = await anext(events)
            except StopAsyncIteration:
                raise self._error("stream", "the stream ended without any event", retryable=True) from None
            except BaseException:
                await events.aclose()
                raise
            return first, events

        first, events = await self._retrying(open_stream)
        try:
            yield first
            async for event in events:
                yield event
        finally:
            await events.aclose()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Non-streamed call, normalised through the same events as :meth:`stream`."""
        body = self._build_body(request, stream=False)

        async def post() -> Any:
            client = self._get_client()
            try:
                response = await client.post(self._url(), content=encode_body(body), headers=self._headers())
                if response.status_code >= 400:
                    raise self._http_error(response)
                return response.json()
            except httpx.HTTPError as exc:
                raise self._transport_error(exc) from exc
            except ValueError as exc:  # the body was not JSON
                raise self._error("stream", f"the provider sent invalid JSON: {exc}") from exc

        data = await self._retrying(post)
        accumulator = StreamAccumulator()
        try:
            for event in self._events_from_json(data):
                accumulator.add(event)
        except ProviderError as err:
            raise self._scrub(err) from None
        return accumulator.response()

    async def aclose(self) -> None:
        """Close the HTTP client and its pooled connections."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()

    # ------------------------------------------------------------ vendor hooks

    @abc.abstractmethod
    def _url(self) -> str:
        """The endpoint to POST to."""

    @abc.abstractmethod
    def _auth_headers(self) -> dict[str, str]:
        """Headers that carry the key (and API version)."""

    @abc.abstractmethod
    def _build_body(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body for ``request`` (repaired, with ``extra_body`` merged last)."""

    @abc.abstractmethod
    def _events_from_sse(self, events: AsyncIterator[ServerSentEvent]) -> AsyncIterator[ProviderEvent]:
        """Normalise a stream; return after the final event, raise on a cut or an error."""

    @abc.abstractmethod
    def _events_from_json(self, data: Any) -> Iterable[ProviderEvent]:
        """Normalise a non-streamed response into the events a stream would give."""

    def _vendor_error(self, data: Any) -> str | None:
        """The vendor's error text from a JSON error body (generic shapes by default)."""
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
            for key in ("message", "detail"):
                if isinstance(data.get(key), str):
                    return str(data[key])
        return None

    # ----------------------------------------------------------------- helpers

    def _get_client(self) -> httpx.AsyncClient:
        # A client's pooled connections belong to the loop that opened them. Code that
        # runs each task under its own asyncio.run() would otherwise reuse dead
        # connections, so a new loop gets a new client (the old loop is gone; its
        # sockets were closed with it).
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            factory: type[httpx.AsyncClient] = (
                httpx_aiohttp.HttpxAiohttpClient if self.transport == "aiohttp" else httpx.AsyncClient
            )
            self._client = factory(timeout=self._timeout, limits=self._limits, verify=tls_context())
            self._client_loop = loop
        return self._client

    def _headers(self) -> dict[str, str]:
        if self._extra_headers_problem:
            raise self._error(
                "bad_request", f"the provider's extra headers cannot be sent: {self._extra_headers_problem}"
            )
        headers = {"content-type": "application/json", "user-agent": "claw-platform"}
        headers.update(self._auth_headers())
        headers.update(self._extra_headers)
        return headers

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        return await with_retries(
            attempt, max_retries=self.max_retries, sleep=self._sleep, provider=self.name
        )

    async def _stream_once(self, body: dict[str, Any]) -> AsyncGenerator[ProviderEvent, None]:
        client = self._get_client()
        try:
            # The gap between chunks is bounded by a ReadDeadline, not the client's
            # read timeout (a timer per chunk).
            async with (
                ReadDeadline(self._timeout.read) as deadline,
                aconnect_sse(
                    client,
                    "POST",
                    self._url(),
                    content=encode_body(body),
                    headers=self._headers(),
                    timeout=self._stream_timeout,
                ) as source,
            ):
                if source.response.status_code >= 400:
                    await source.response.aread()
                    raise self._http_error(source.response)
                sse_events = deadline.watch(sse_events_of(source))
                async for event in self._events_from_sse(sse_events):
                    yield event
                await _drain(sse_events)
        except ProviderError as err:
            raise self._scrub(err) from None
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from exc
        except SSEError as exc:
            raise self._error("stream", f"the provider did not send an event stream: {exc}") from exc
        except _AIOHTTP_ERRORS as exc:
            # Read straight from aiohttp (sse_source): its errors come unwrapped.
            raise self._aiohttp_error(exc) from exc

    def _redact(self, text: str) -> str:
        if self._api_key and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "[redacted]")
        return text

    def _scrub(self, err: ProviderError) -> ProviderError:
        """Give an error raised by vendor parsing this provider's name and no key."""
        err.message = self._redact(err.message)
        err.args = (err.message,)
        err.provider = err.provider or self.name
        return err

    def _error(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> ProviderError:
        return ProviderError(
            kind,
            self._redact(message),
            status=status,
            retryable=retryable,
            retry_after=retry_after,
            provider=self.name,
        )

    def _http_error(self, response: httpx.Response) -> ProviderError:
        status = response.status_code
        kind, retryable = error_kind_for_status(status)
        try:
            vendor = self._vendor_error(json.loads(response.content))
        except ValueError:
            vendor = response.text or None
        message = _KIND_TEXT[kind]
        if vendor:
            message = f"{message}: {short_text(vendor)}"
        return self._error(
            kind,
            message,
            status=status,
            retryable=retryable,
            retry_after=parse_retry_after(response.headers) if retryable else None,
        )

    def _transport_error(self, exc: httpx.HTTPError) -> ProviderError:
        cause = exc.__cause__
        if aiohttp is not None and isinstance(cause, aiohttp.ClientError):
            # httpx-aiohttp maps every aiohttp connection error to ConnectTimeout (a
            # refused connect, a server hang-up); classify by the original instead.
            return self._aiohttp_error(cause)
        detail = short_text(str(exc) or type(exc).__name__, 200)
        if isinstance(exc, httpx.ConnectTimeout):
            return self._error("timeout", "timed out connecting to the provider", retryable=True)
        if isinstance(exc, httpx.TimeoutException):
            return self._error("timeout", f"the provider did not answer in time ({detail})", retryable=True)
        if isinstance(exc, httpx.ConnectError):
            return self._error("connection", f"could not connect to the provider: {detail}", retryable=True)
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
            # A cut mid-response. Retried only while nothing reached the caller.
            return self._error("stream", f"the connection was cut mid-response: {detail}", retryable=True)
        return self._error("connection", f"request to the provider failed: {detail}")

    def _aiohttp_error(self, exc: Exception) -> ProviderError:
        detail = short_text(str(exc) or type(exc).__name__, 200)
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return self._error("timeout", f"the provider did not answer in time ({detail})", retryable=True)
        if isinstance(exc, aiohttp.ClientConnectorError):
            return self._error("connection", f"could not connect to the provider: {detail}", retryable=True)
        if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
            return self._error("stream", f"the connection was cut mid-response: {detail}", retryable=True)
        # An OS-level error (reset while sending) is transient; a bad URL is not.
        return self._error(
            "connection",
            f"request to the provider failed: {detail}",
            retryable=isinstance(exc, aiohttp.ClientOSError),
        )
