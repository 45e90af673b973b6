"""Run traces over OTLP/HTTP (protobuf) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set,
for Jaeger, Tempo, Langfuse or Phoenix. The spans the engine collected are handed
to opentelemetry-sdk's batch processor as finished spans with their own ids, so the
stored trace and the exported one are the same trace."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanProcessor,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agents.engine import tracing

_RESOURCE = Resource.create({"service.name": "claw-platform"})
_SCOPE = InstrumentationScope("claw_platform.observability")
_lock = threading.Lock()
_processor: SpanProcessor | None = None
_configured = False


def use_exporter(exporter: SpanExporter | None, *, batch: bool = False) -> None:
    """Send spans to ``exporter`` (tests: an in-memory exporter); None goes back to
    the environment's choice."""
    global _processor, _configured
    with _lock:
        if _processor is not None:
            _processor.shutdown()
        _processor = (
            None
            if exporter is None
            else (BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        )
        _configured = exporter is not None


def _current() -> SpanProcessor | None:
    global _processor, _configured
    if _configured:
        return _processor
    with _lock:
        if not _configured:
            endpoint = getattr(settings, "OTEL_EXPORTER_OTLP_ENDPOINT", "")
            if endpoint:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
                _processor = BatchSpanProcessor(exporter)
                atexit.register(_processor.shutdown)
            _configured = True
    return _processor


def flush(timeout_ms: int = 5000) -> None:
    processor = _current()
    if processor is not None:
        processor.force_flush(timeout_ms)


def export_spans(spans: Iterable[tracing.SpanRecord]) -> None:
    processor = _current()
    if processor is None:
        return
    for span in spans:
        processor.on_end(to_readable_span(span))


def _attribute(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [v if isinstance(v, bool | int | float | str) else str(v) for v in value]
    return str(value)


def to_readable_span(span: tracing.SpanRecord) -> ReadableSpan:
    flags = TraceFlags(TraceFlags.SAMPLED)
    trace_id = int(span.trace_id, 16)
    context = SpanContext(trace_id, int(span.span_id, 16), is_remote=False, trace_flags=flags)
    parent = (
        SpanContext(trace_id, int(span.parent_id, 16), is_remote=False, trace_flags=flags)
        if span.parent_id
        else None
    )
    attributes = {key: _attribute(value) for key, value in span.attributes.items()}
    if span.input:
        attributes["input.value"] = span.input
    if span.output:
        attributes["output.value"] = span.output
    status = Status(StatusCode.ERROR, span.error) if span.status == "error" else Status(StatusCode.OK)
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=_RESOURCE,
        attributes=attributes,
        kind=SpanKind.CLIENT if span.kind == tracing.SPAN_CHAT else SpanKind.INTERNAL,
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns or span.start_ns,
        instrumentation_scope=_SCOPE,
    )
