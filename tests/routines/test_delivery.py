"""Delivery (C6): a routine's output goes to its session (the run's reply), to a
chat-platform channel and to a signed webhook through the SSRF guard; a failing
destination is recorded on the run, which stays ok."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from agents.models import Routine, Turn
from tests.chat_platforms.conftest import make_channel
from tests.chat_platforms.test_telegram import SECRET
from tests.routines.helpers import finish_agent_runs, make_routine, runs_of, tick
from tools_app.actions.extensions import do_allow_host
from tools_app.hooks.kinds import sign_webhook

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _inline_delivery(settings):
    settings.CLAW_ROUTINE_DELIVERY_INLINE = True


def routine_delivering(ts, channel, url: str) -> Routine:
    routine = make_routine(ts, next_run_at=NOW, interval_seconds=3600, name="nightly report")
    Routine._base_manager.filter(pk=routine.pk).update(
        deliver_channel=channel, deliver_target="-100", webhook_url=url, max_retries=0
    )
    routine = Routine._base_manager.get(pk=routine.pk)
    routine.webhook_secret = "whsec-routine"
    routine.save(update_fields=["webhook_secret"])
    return routine


def test_the_output_reaches_the_session_the_channel_and_a_signed_webhook(
    tenant_a, fake_telegram, fake_callback
):
    channel = make_channel(tenant_a, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)
    do_allow_host(
        tenant_a.tenant,
        "127.0.0.1",
        port=int(fake_callback.url.rsplit(":", 1)[1]),
        acting_user=tenant_a.owner,
    )
    routine = routine_delivering(tenant_a, channel, fake_callback.hook_url)
    tick(NOW)
    finish_agent_runs(routine, reply="All backups are green.")
    tick(NOW)
    [row] = runs_of(routine)
    assert row.status == "ok"
    assert row.delivery == "channel: sent; webhook: HTTP 200"
    turn = Turn._base_manager.get(run__pk=row.run_id)  # the session has the reply
    assert turn.session_id == Routine._base_manager.get(pk=routine.pk).session_id
    [sent] = fake_telegram.calls_of("sendMessage")
    assert (sent["chat_id"], sent["text"]) == ("-100", "All backups are green.")
    [posted] = fake_callback.calls_of("routine.run")
    headers = posted["_headers"]
    assert headers["x-claw-signature"] == sign_webhook(
        "whsec-routine", headers["x-claw-timestamp"], posted["_raw"].encode()
    )
    body = json.loads(posted["_raw"])
    assert body["run"]["output"] == "All backups are green."
    assert body["routine"]["name"] == "nightly report"


def test_failed_deliveries_are_recorded_and_the_run_stays_ok(tenant_a, fake_telegram):
    channel = make_channel(tenant_a, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)
    routine = routine_delivering(tenant_a, channel, "http://10.1.2.3/hook")  # private: refused
    fake_telegram.fail("sendMessage", 403)
    tick(NOW)
    finish_agent_runs(routine, reply="report")
    tick(NOW)
    [row] = runs_of(routine)
    assert row.status == "ok"
    assert row.delivery.startswith("channel: failed: ")
    assert "webhook: refused: " in row.delivery
