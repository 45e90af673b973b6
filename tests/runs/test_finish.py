"""A run's end (``_finish_run``): one statement settles the run and returns it with its
turn; a worker whose lease was lost changes nothing; a run that would pause for
approval but was stopped meanwhile ends cancelled, with no approval request."""

from __future__ import annotations

import pytest

from agents.actions.runs import do_send_message
from agents.engine.types import ToolCallPart
from agents.models import ApprovalRequest, Run, RunStatus
from agents.runtime.worker import _finish_run, claim_run
from tests.runs.helpers import fresh, new_session

pytestmark = pytest.mark.django_db(transaction=True)


class Pending:
    def __init__(self, call_id: str) -> None:
        self.call = ToolCallPart(id=call_id, name="http_post", arguments={"url": "https://x.example"})
        self.reason = "posts to the web"


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
