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


def test_a_requests_log_lines_carry_its_request_and_tenant_ids(live_agent, client, json_lines):
    client.force_login(live_agent.owner)
    logging.getLogger("claw.test").info("before any request")
    response = client.get("/admin/agents/run/999999/change/", HTTP_X_REQUEST_ID="req-abc.123")
    assert response.status_code in (302, 404)
    lines = [r for r in records(json_lines) if r.get("request_id") == "req-abc.123"]
    assert lines, records(json_lines)
    assert lines[0]["tenant_id"] == str(live_agent.tenant.pk)
    assert lines[0]["user_id"] == str(live_agent.owner.pk)
    first = records(json_lines)[0]
    assert first["event"] == "before any request"
    assert "request_id" not in first
