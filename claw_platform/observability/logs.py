"""Structured logs (O6): with ``CLAW_LOG_FORMAT=json`` every log line is one JSON
object carrying the tenant, user, session, run, trace and request ids known where it
was logged (structlog's context variables, bound by the request middleware and by a
run's trace); the readable console format stays the default.

Context variables follow asyncio tasks, so two runs on one worker loop each log
their own ids."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, merge_contextvars, reset_contextvars

from agents.engine import tracing

_REQUEST_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def add_trace_id(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    trace_id = tracing.current_trace_id()
    if trace_id and "trace_id" not in event:
        event["trace_id"] = trace_id
    return event


def _shared_processors() -> list[Any]:
    return [
        merge_contextvars,
        add_trace_id,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def json_formatter() -> logging.Formatter:
    """The ``json`` formatter of ``LOGGING`` (one JSON object per line)."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )


def configure_structlog() -> None:
    """structlog's own loggers go through the standard library's handlers."""
    structlog.configure(
        processors=[*_shared_processors(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def bind_ids(**ids: Any) -> Mapping[str, Any]:
    """Bind ids (empty ones skipped) for the current context; returns the tokens
    :func:`unbind` takes."""
    return bind_contextvars(**{key: str(value) for key, value in ids.items() if value not in (None, "")})


def unbind(tokens: Mapping[str, Any]) -> None:
    reset_contextvars(**tokens)


def request_id_of(request: Any) -> str:
    """A proxy's ``X-Request-ID`` when it is a plain token, else a new one."""
    given = str(request.META.get("HTTP_X_REQUEST_ID", ""))[:64]
    if given and set(given) <= _REQUEST_ID_CHARS:
        return given
    return uuid.uuid4().hex
