"""A4 webhooks (HMAC, replay window, idempotency, 64 KB cap, per-source rate limit),
A5 pairing (one-time code, lock-out) and U5 the tenant event stream."""

from __future__ import annotations

import json
import time

import pytest

from agents.models import Run
from claw_platform.api.actions.keys import do_issue_pairing_code
from claw_platform.api.models import AgentWebhook
from claw_platform.api.views.hooks import signature_for
from tests.api.conftest import body_of, client_for, make_key
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hook_answers_with_the_reply_and_an_idempotent_repeat_starts_nothing(
    live_agent, fake_llm, inline_runs
):
    client = client_for(make_key(live_agent, "write"))
    fake_llm.script(FakeTurn(text="Hooked."))
    body = json.dumps({"message": "deploy finished"})
    first = client.generic(
        "POST",
        "/api/v1/hooks/assistant/",
        body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="evt-1",
    )
    assert first.status_code == 200
    reply = body_of(first)
    assert (reply["response"], reply["model"]) == ("Hooked.", "assistant")
    runs = Run.objects.unscoped().filter(tenant=live_agent.tenant).count()
    again = client.generic(
        "POST",
        "/api/v1/hooks/assistant/",
        body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="evt-1",
    )
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == reply
    assert Run.objects.unscoped().filter(tenant=live_agent.tenant).count() == runs
    other = client.generic(
        "POST",
        "/api/v1/hooks/assistant/",
        json.dumps({"message": "other"}),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="evt-1",
    )
    assert other.status_code == 422


def test_a_signed_hook_refuses_bad_and_stale_signatures_and_big_bodies(live_agent, fake_llm, inline_runs):
    AgentWebhook.objects.unscoped().create(
        tenant=live_agent.tenant,
        agent=live_agent.agent,
        signing_secret="s3cret",
        mode="async",
        tolerance_seconds=60,
    )
    client = client_for(make_key(live_agent, "write"))
    body = json.dumps({"message": "signed"}).encode()
    now = str(int(time.time()))

    def post(timestamp: str, signature: str, payload: bytes = body):
        return client.generic(
            "POST",
            "/api/v1/hooks/assistant/",
            payload,
            content_type="application/json",
            HTTP_X_CLAW_TIMESTAMP=timestamp,
            HTTP_X_CLAW_SIGNATURE=signature,
        )

    assert client.post("/api/v1/hooks/assistant/", {"message": "unsigned"}, format="json").status_code == 401
    assert post(now, "sha256=" + "0" * 64).json()["error"]["code"] == "bad_signature"
    stale = str(int(time.time()) - 3600)
    assert post(stale, signature_for("s3cret", stale, body)).json()["error"]["code"] == "stale_signature"
    big = json.dumps({"message": "x" * 70_000}).encode()
    assert post(now, signature_for("s3cret", now, big), big).status_code == 413
    fake_llm.default_reply = FakeTurn(text="ok")
    accepted = post(now, signature_for("s3cret", now, body))
    assert accepted.status_code == 202, accepted.content
    assert accepted.json()["run"]["status"] in {"queued", "running", "completed"}


def test_a_hook_is_rate_limited_per_source(live_agent, fake_llm, inline_runs):
    AgentWebhook.objects.unscoped().create(
        tenant=live_agent.tenant, agent=live_agent.agent, mode="async", rate_per_minute=2
    )
    fake_llm.default_reply = FakeTurn(text="ok")
    client = client_for(make_key(live_agent, "write"))
    statuses = [
        client.post("/api/v1/hooks/assistant/", {"message": f"m{i}"}, format="json").status_code
        for i in range(3)
    ]
    assert statuses == [202, 202, 429]


def test_pairing_exchanges_a_code_once_and_locks_out_guessers(tenant_a, settings):
    settings.CLAW_PAIR_MAX_FAILURES = 3
    _pairing, code = do_issue_pairing_code(
        tenant_a.tenant, name="kiosk", scopes=["read"], acting_user=tenant_a.owner
    )
    client = client_for(None)
    paired = client.post("/api/v1/pair/", {}, format="json", HTTP_X_PAIRING_CODE=code.lower())
    assert paired.status_code == 200, paired.content
    token = paired.json()["token"]
    assert client_for(token).get("/api/v1/agents/").status_code == 200
    reused = client.post("/api/v1/pair/", {"code": code}, format="json")
    assert reused.status_code == 401, reused.content
    # The reused code was the first failure; two more lock the address out.
    assert client.post("/api/v1/pair/", {"code": "WRONG-GUESS"}, format="json").status_code == 401
    locked = client.post("/api/v1/pair/", {"code": "WRONG-GUESS"}, format="json")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) > 0
    _other, fresh = do_issue_pairing_code(
        tenant_a.tenant, name="late", scopes=["read"], acting_user=tenant_a.owner
    )
    assert client.post("/api/v1/pair/", {"code": fresh}, format="json").status_code == 429


def test_the_tenant_event_stream_replays_after_last_event_id_and_holds_only_its_tenant(
    live_agent, tenant_b, fake_llm, inline_runs
):
    client = client_for(make_key(live_agent, "write"))
    session = client.post("/api/v1/sessions/", {"agent": "assistant", "title": "t"}, format="json").json()
    fake_llm.script(FakeTurn(text="Event source."))
    body_of(
        client.post(
            f"/api/v1/sessions/{session['id']}/messages/", {"text": "hi", "mode": "wait"}, format="json"
        )
    )
    stream = b"".join(client.get("/api/v1/events/?after=0&timeout=1")).decode()
    ids = [int(line[4:]) for line in stream.splitlines() if line.startswith("id: ")]
    assert "event: run.completed" in stream
    assert ids == sorted(ids)
    resumed = b"".join(client.get("/api/v1/events/?timeout=1", HTTP_LAST_EVENT_ID=str(ids[-2]))).decode()
    assert [int(line[4:]) for line in resumed.splitlines() if line.startswith("id: ")] == ids[-1:]
    theirs = b"".join(
        client_for(make_key(tenant_b, "read")).get("/api/v1/events/?after=0&timeout=1")
    ).decode()
    assert session["id"] not in theirs
    assert "Event source." not in theirs


def test_a_wait_mode_repeat_follows_the_run_after_the_first_caller_hangs_up(
    live_agent, fake_llm, inline_runs
):
    """Issue 21, defect 6: the first caller of a ``sync`` hook left before the run
    ended; its Idempotency-Key must not answer 409 forever. A repeat gets a 202 with
    the run while it runs, then the finished reply; no second run is started."""
    import httpx

    from tests.api.server import live_asgi_server

    fake_llm.script(FakeTurn(text="Deployed, eventually.", delay=3.0))
    headers = {
        "Authorization": f"Bearer {make_key(live_agent, 'write')}",
        "Content-Type": "application/json",
        "Idempotency-Key": "deploy-42",
    }
    body = json.dumps({"message": "deploy finished", "mode": "sync"})
    with live_asgi_server() as url:
        hook = f"{url}/api/v1/hooks/assistant/"
        with pytest.raises(httpx.TimeoutException):
            httpx.post(hook, content=body, headers=headers, timeout=1.0)  # hangs up mid-wait
        running = httpx.post(hook, content=body, headers=headers, timeout=30)
        assert running.status_code == 202, running.text
        assert running.headers["Idempotent-Replayed"] == "true"
        assert running.json()["run"]["status"] in {"queued", "running"}
        assert running.json()["response"] is None
        run = Run.objects.unscoped().get(pk=running.json()["run"]["id"])
        deadline = time.monotonic() + 30
        while run.status in {"queued", "running"} and time.monotonic() < deadline:
            time.sleep(0.1)
            run.refresh_from_db()
        assert run.status == "completed", run.error
        for _ in range(2):
            done = httpx.post(hook, content=body, headers=headers, timeout=30)
            assert done.status_code == 200, done.text
            assert done.headers["Idempotent-Replayed"] == "true"
            assert done.json()["response"] == "Deployed, eventually."
            assert done.json()["run"]["id"] == run.pk
    assert Run.objects.unscoped().filter(tenant=live_agent.tenant, session__channel="webhook").count() == 1
