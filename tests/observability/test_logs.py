"""Structured logs (O6): a JSON line logged during a run carries its tenant, run,
session and trace ids; a request's lines carry the request id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from agents.actions.runs import do_send_message
from agents.runtime.worker import execute_run
from claw_platform.observability.logs import json_formatter
from claw_platform.observability.run_trace import trace_id_for_run
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.runs.helpers import new_session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_json_log_line_of_a_run_carries_its_ids(live_agent, fake_llm, settings, json_lines):
    settings.CLAW_RUN_TOOLS_FACTORY = "tests.observability.tools.broken_tool"
    fake_llm.script(FakeTurn(tool_calls=[("broken", {}, "call_1")]), FakeTurn(text="It broke."))
    run = do_send_message(new_session(live_agent), "try it", acting_user=live_agent.member)
    assert execute_run(run.pk, wait=True) == "completed"
    line = next(r for r in records(json_lines) if r["event"] == "tool broken raised")
    assert line["level"] == "error"
    assert line["logger"] == "claw.engine.tools"
    assert line["tenant_id"] == str(run.tenant_id)
    assert line["run_id"] == str(run.pk)
    assert line["session_id"] == str(run.session_id)
    assert line["trace_id"] == trace_id_for_run(run.pk)
    assert "RuntimeError: a bug in the tool" in line["exception"]
    assert "timestamp" in line


def test_a_requests_log_lines_carry_its_request_and_tenant_ids(live_agent, rf, json_lines):
    from django.http import HttpResponse

    from claw_platform.tenancy.middleware import TenantMiddleware

    def view(request):
        logging.getLogger("claw.test").info("inside the request")
        return HttpResponse("ok")

    request = rf.get("/somewhere/", HTTP_X_REQUEST_ID="req-abc.123")
    request.user = live_agent.owner
    request.session = {}
    logging.getLogger("claw.test").info("before any request")
    assert TenantMiddleware(view)(request).status_code == 200
    request = rf.get("/somewhere/", HTTP_X_REQUEST_ID="<script>")
    request.user = live_agent.owner
    request.session = {}
    TenantMiddleware(view)(request)
    first, inside, forged = records(json_lines)
    assert first["event"] == "before any request"
    assert "request_id" not in first
    assert inside["request_id"] == "req-abc.123"
    assert inside["tenant_id"] == str(live_agent.tenant.pk)
    assert inside["user_id"] == str(live_agent.owner.pk)
    assert forged["request_id"] != "<script>"
    assert len(forged["request_id"]) == 32
