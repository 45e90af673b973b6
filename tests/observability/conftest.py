from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents.runtime.worker import shutdown_supervisor
from claw_platform.observability import otlp


@pytest.fixture(autouse=True)
def _stop_run_loop() -> Iterator[None]:
    yield
    shutdown_supervisor()


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Spans exported by runs, caught in memory (opentelemetry-sdk's own exporter)."""
    exporter = InMemorySpanExporter()
    otlp.use_exporter(exporter)
    try:
        yield exporter
    finally:
        otlp.use_exporter(None)
