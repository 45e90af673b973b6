"""Spans of a run (O4), collected in memory while the engine works.

The engine opens spans with :func:`span` around what it does (an LLM call, a tool
call, a hook, a sub-agent); the worker opens the trace with :func:`start_trace` and,
when the run's execution ends, stores the collected :class:`SpanRecord` list
(``claw_platform/observability``) and exports it over OTLP. Without a trace (tests,
the light engine) :func:`span` hands back one shared do-nothing span, so an untraced
call costs a context-variable read.

Names and attributes follow OpenTelemetry's GenAI semantic conventions:
``invoke_agent {agent}``, ``chat {model}``, ``execute_tool {tool}``, and
``gen_ai.*`` attributes. Nothing here imports Django.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

# GoClaw's verbose mode: inputs and outputs kept up to this many characters.
VERBOSE_LIMIT = 50_000
# Outside verbose mode an output is kept as a preview only.
PREVIEW_LIMIT = 500

SPAN_AGENT = "agent"
SPAN_CHAT = "chat"
SPAN_TOOL = "tool"
SPAN_HOOK = "hook"
SPAN_MEMORY = "memory"
SPAN_GUARD = "guard"


def new_span_id() -> str:
    return os.urandom(8).hex()


@dataclass(slots=True)
class SpanRecord:
    """One finished (or running) span; times are ``time.time_ns()`` values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    error: str = ""
    input: str = ""
    output: str = ""
    verbose: bool = False

    def set(self, key: str, value: Any) -> None:
        if value is not None and value != "":
            self.attributes[key] = value

    def update(self, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.set(key, value)

    def fail(self, error: str, error_type: str = "") -> None:
        self.status = "error"
        self.error = error[:2000]
        if error_type:
            self.attributes["error.type"] = error_type

    def record_input(self, text: str) -> None:
        """Inputs are kept in verbose mode only (they may hold a whole conversation)."""
        if self.verbose:
            self.input = text[:VERBOSE_LIMIT]

    def record_output(self, text: str) -> None:
        self.output = text[: VERBOSE_LIMIT if self.verbose else PREVIEW_LIMIT]

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e6


class _NullSpan:
    """What :func:`span` yields outside a trace: every call does nothing."""

    __slots__ = ()
    verbose = False
    attributes: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        return None

    def update(self, values: dict[str, Any]) -> None:
        return None

    def fail(self, error: str, error_type: str = "") -> None:
        return None

    def record_input(self, text: str) -> None:
        return None

    def record_output(self, text: str) -> None:
        return None


NULL_SPAN = _NullSpan()
SpanLike = SpanRecord | _NullSpan


@dataclass(slots=True)
class RunTrace:
    """The spans of one execution of a run (a resumed run adds a second root to
    the same trace: the trace id comes from the run)."""

    trace_id: str
    verbose: bool = False
    spans: list[SpanRecord] = field(default_factory=list)


_trace: ContextVar[RunTrace | None] = ContextVar("claw_trace", default=None)
_parent: ContextVar[SpanRecord | None] = ContextVar("claw_span", default=None)


def current_trace() -> RunTrace | None:
    return _trace.get()


def current_span() -> SpanRecord | None:
    return _parent.get()


def current_trace_id() -> str:
    trace = _trace.get()
    return trace.trace_id if trace is not None else ""


@contextlib.contextmanager
def start_trace(trace_id: str, *, verbose: bool = False) -> Iterator[RunTrace]:
    """Collect the spans opened in this context (and the tasks it starts)."""
    trace = RunTrace(trace_id, verbose)
    trace_token = _trace.set(trace)
    parent_token = _parent.set(None)
    try:
        yield trace
    finally:
        _parent.reset(parent_token)
        _trace.reset(trace_token)


@contextlib.contextmanager
def span(name: str, kind: str, attributes: dict[str, Any] | None = None) -> Iterator[SpanLike]:
    """A child of the current span (or the trace's root). An exception escaping it
    marks it failed and goes on; cancellation is recorded as such."""
    trace = _trace.get()
    if trace is None:
        yield NULL_SPAN
        return
    parent = _parent.get()
    record = SpanRecord(
        trace_id=trace.trace_id,
        span_id=new_span_id(),
        parent_id=parent.span_id if parent is not None else "",
        name=name,
        kind=kind,
        start_ns=time.time_ns(),
        attributes={k: v for k, v in (attributes or {}).items() if v is not None and v != ""},
        verbose=trace.verbose,
    )
    trace.spans.append(record)
    token = _parent.set(record)
    try:
        yield record
    except BaseException as exc:
        if record.status == "ok":
            cancelled = not isinstance(exc, Exception)
            record.fail("cancelled" if cancelled else str(exc) or type(exc).__name__, type(exc).__name__)
        raise
    finally:
        record.end_ns = time.time_ns()
        _parent.reset(token)


def chat_input_json(request: Any) -> str:
    """What an LLM call was sent (verbose mode): system prompt and messages as JSON,
    cut to :data:`VERBOSE_LIMIT` characters."""
    import json

    messages = [m.to_dict() for m in request.messages]
    text = json.dumps({"system": request.system, "messages": messages}, ensure_ascii=False, default=str)
    return text[:VERBOSE_LIMIT]


def arguments_json(arguments: Any) -> str:
    import json

    return json.dumps(arguments, ensure_ascii=False, default=str)[:VERBOSE_LIMIT]
