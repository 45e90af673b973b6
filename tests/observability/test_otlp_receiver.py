"""The OTLP export, checked by a local OTLP/HTTP receiver that decodes the protobuf
it is sent (opentelemetry-proto), as Jaeger or Tempo would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from claw_platform.observability import otlp
from claw_platform.observability.models import Span
from tests.observability.test_traces import run_with_two_tool_calls

pytestmark = pytest.mark.django_db(transaction=True)


class OTLPReceiver:
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                receiver.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def receiver(settings) -> Iterator[OTLPReceiver]:
    server = OTLPReceiver()
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = server.endpoint
    otlp.use_exporter(None)  # the next export reads the endpoint
    try:
        yield server
    finally:
        otlp.use_exporter(None)
        server.stop()


def test_a_runs_trace_reaches_an_otlp_receiver_as_protobuf(live_agent, fake_llm, settings, receiver):
    run = run_with_two_tool_calls(live_agent, fake_llm, settings)
    otlp.flush()
    assert receiver.paths
    assert set(receiver.paths) == {"/v1/traces"}
    received = {span.span_id.hex(): span for span in receiver.spans()}
    stored = {s.span_id: s for s in Span.objects.unscoped().filter(run=run)}
    assert set(received) == set(stored)
    tool = next(span for span in received.values() if span.name == "execute_tool lookup")
    attributes = {a.key: a.value for a in tool.attributes}
    assert attributes["gen_ai.tool.call.id"].string_value == "call_1"
    root = next(s for s in stored.values() if not s.parent_span_id)
    assert tool.parent_span_id.hex() == root.span_id
    assert tool.trace_id.hex() == root.trace_id
    chat = next(span for span in received.values() if span.name.startswith("chat "))
    chat_attributes = {a.key: a.value for a in chat.attributes}
    assert chat_attributes["gen_ai.usage.input_tokens"].int_value == 120
    resource = {
        a.key: a.value.string_value for a in receiver.requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "claw-platform"
