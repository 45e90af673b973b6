"""A run's end (``_finish_run``): one statement settles the run and returns it with its
turn, and its settling event is stored in the same transaction; a worker whose lease
was lost changes nothing and stores and relays no event; a run that would pause for
approval but was stopped meanwhile ends cancelled, with no approval request and no
``approval_needed`` event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.actions.runs import do_send_message
from agents.engine.types import ToolCallPart
from agents.models import ApprovalRequest, Run, RunStatus
from agents.runtime.events import RunEventSink, events_after
from agents.runtime.worker import _finish_run, claim_run
from tests.runs.helpers import fresh, new_session

pytestmark = pytest.mark.django_db(transaction=True)


class Pending:
    def __init__(self, call_id: str) -> None:
        self.call = ToolCallPart(id=call_id, name="http_post", arguments={"url": "https://x.example"})
        self.reason = "posts to the web"


class RecordingRelay:
    def __init__(self) -> None:
        self.relayed: list[tuple[int, str]] = []

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        self.relayed.append((seq, event_type))


def sink_with(claim, event_type: str, payload: dict[str, Any]) -> tuple[RunEventSink, RecordingRelay]:
    relay = RecordingRelay()
    sink = RunEventSink(claim.run_id, claim.tenant_id, last_seq=claim.event_seq, relay=relay)
    asyncio.run(sink.emit(event_type, payload))
    return sink, relay


def finish(claim, status, sink, pending=()):
    """As the worker does: settle, then relay what was held back."""
    settled = _finish_run(claim, "finisher", status, "", list(pending), None, sink)
    if settled:
        sink.settled()
    asyncio.run(sink.drain())
    return settled


def claimed(ts, owner="finisher"):
    run = do_send_message(new_session(ts), "hi", acting_user=ts.member)
    claim = claim_run(run.pk, owner)
    assert claim is not None
    return run, claim


def test_a_finished_run_is_settled_with_its_lease_released(live_agent):
    run, claim = claimed(live_agent)
    assert _finish_run(claim, "finisher", RunStatus.COMPLETED, "", [], None) is True
    run = fresh(run)
    assert (run.status, run.lease_owner, run.lease_expires_at, run.cancel_requested) == (
        "completed",
        "",
        None,
        False,
    )
    assert run.finished_at is not None


def test_a_worker_that_lost_the_lease_changes_nothing(live_agent):
    run, claim = claimed(live_agent)
    Run.objects.unscoped().filter(pk=run.pk).update(lease_owner="another-worker")
    assert _finish_run(claim, "finisher", RunStatus.COMPLETED, "", [], None) is False
    run = fresh(run)
    assert (run.status, run.lease_owner, run.finished_at) == ("running", "another-worker", None)


def test_a_pause_for_approval_records_the_pending_calls(live_agent):
    run, claim = claimed(live_agent)
    assert _finish_run(claim, "finisher", RunStatus.AWAITING_APPROVAL, "", [Pending("c1")], None) is True
    run = fresh(run)
    assert (run.status, run.finished_at, run.lease_owner) == ("awaiting_approval", None, "")
    request = ApprovalRequest.objects.unscoped().get(run=run)
    assert (request.call_id, request.tool_name, request.status) == ("c1", "http_post", "pending")


def test_a_run_stopped_while_it_would_pause_ends_cancelled_without_a_request(live_agent):
    run, claim = claimed(live_agent)
    Run.objects.unscoped().filter(pk=run.pk).update(cancel_requested=True)
    assert _finish_run(claim, "finisher", RunStatus.AWAITING_APPROVAL, "", [Pending("c1")], None) is True
    run = fresh(run)
    assert (run.status, run.error) == ("cancelled", "stopped by the user")
    assert not ApprovalRequest.objects.unscoped().filter(run=run).exists()


def test_the_terminal_event_is_stored_with_the_settle_and_relayed_after_it(live_agent):
    run, claim = claimed(live_agent)
    sink, relay = sink_with(claim, "run.completed", {"status": "completed", "text": "done"})
    assert events_after(fresh(run), 1) == []  # held for the settle, not stored yet
    assert finish(claim, RunStatus.COMPLETED, sink) is True
    run = fresh(run)
    events = events_after(run, 1)
    assert [(e.seq, e.type) for e in events] == [(2, "run.completed")]
    assert run.event_seq == 2
    assert relay.relayed == [(2, "run.completed")]


def test_a_worker_that_lost_the_lease_stores_and_relays_no_terminal_event(live_agent):
    run, claim = claimed(live_agent)
    sink, relay = sink_with(claim, "run.completed", {"status": "completed", "text": "done"})
    Run.objects.unscoped().filter(pk=run.pk).update(lease_owner="another-worker")
    assert finish(claim, RunStatus.COMPLETED, sink) is False
    assert events_after(fresh(run), 1) == []
    assert relay.relayed == []


def test_a_pause_stopped_meanwhile_keeps_its_cancellation_and_drops_approval_needed(live_agent):
    run, claim = claimed(live_agent)
    sink, relay = sink_with(claim, "approval_needed", {"calls": ["c1"]})
    Run.objects.unscoped().filter(pk=run.pk).update(cancel_requested=True)
    assert finish(claim, RunStatus.AWAITING_APPROVAL, sink, [Pending("c1")]) is True
    events = events_after(fresh(run), 1)
    assert [(e.seq, e.type) for e in events] == [(2, "run.cancelled")]
    assert relay.relayed == []
