"""A1, A2: keys, scopes, the error shape and the endpoints against a real database."""

from __future__ import annotations

import pytest

from agents.models import Agent, LLMProvider, Run, RunStatus
from claw_platform.api.models import ApiKey
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import body_of, client_for, make_key
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_key_is_stored_as_a_hash_and_works_until_revoked(tenant_a):
    key = make_key(tenant_a, "read")
    stored = ApiKey.objects.unscoped().get(tenant=tenant_a.tenant)
    assert key not in (stored.key_hash, stored.prefix)
    assert key.startswith(f"claw_{stored.prefix}_")
    response = client_for(key).get("/api/v1/agents/")
    assert response.status_code == 200
    assert [a["slug"] for a in response.json()["results"]] == ["assistant"]
    assert ApiKey.objects.unscoped().get(pk=stored.pk).last_used_at is not None
    from claw_platform.api.actions.keys import do_revoke_api_key

    do_revoke_api_key(stored, acting_user=tenant_a.owner)
    response = client_for(key).get("/api/v1/agents/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_it_refuses_missing_wrong_and_expired_keys_in_one_shape(tenant_a):
    for client in (client_for(None), client_for("claw_000000000000_nope"), client_for("garbage")):
        response = client.get("/api/v1/agents/")
        assert response.status_code == 401
        assert set(response.json()["error"]) == {"code", "message", "fields"}


def test_a_read_key_cannot_write(tenant_a):
    client = client_for(make_key(tenant_a, "read"))
    response = client.post("/api/v1/sessions/", {"agent": "assistant"}, format="json")
    assert response.status_code == 403
    assert "write" in response.json()["error"]["message"]
    response = client.get("/api/v1/providers/")
    assert response.status_code == 403


def test_bad_input_is_a_4xx_naming_the_field(tenant_a):
    client = client_for(make_key(tenant_a, "admin"))
    cases = [
        (
            client.generic("POST", "/api/v1/sessions/", "{not json", content_type="application/json"),
            400,
            None,
        ),
        (
            client.post("/api/v1/sessions/", {"agent": "assistant", "colour": "red"}, format="json"),
            400,
            "colour",
        ),
        (client.post("/api/v1/sessions/", {"agent": 5}, format="json"), 400, "agent"),
        (client.post("/api/v1/sessions/", {"agent": "nobody"}, format="json"), 400, "agent"),
        (client.get("/api/v1/sessions/?limit=abc"), 400, "limit"),
        (client.get("/api/v1/sessions/?limit=100000"), 400, "limit"),
        (client.get("/api/v1/sessions/?offset=-1"), 400, "offset"),
        (client.get("/api/v1/runs/?status=exploded"), 400, "status"),
        (client.get("/api/v1/runs/99999999/"), 404, None),
        (client.get("/api/v1/sessions/not-a-uuid/"), 404, None),
        (client.get("/api/v1/nowhere/"), 404, None),
        (
            client.post("/api/v1/agents/", {"slug": "x", "name": "X", "model": 10**9}, format="json"),
            400,
            "model",
        ),
        (
            client.patch("/api/v1/agents/assistant/", {"temperature": "hot"}, format="json"),
            400,
            "temperature",
        ),
        (client.generic("POST", "/api/v1/sessions/", "[1, 2]", content_type="application/json"), 400, None),
        (
            client.generic("POST", "/api/v1/sessions/", "x" * 2_000_000, content_type="application/json"),
            413,
            None,
        ),
    ]
    for response, status, field in cases:
        assert response.status_code == status, (response.status_code, response.content[:300])
        error = response.json()["error"]
        assert set(error) == {"code", "message", "fields"}
        if field:
            assert field in error["fields"], error


def test_admin_configures_agents_providers_and_models_with_write_only_keys(tenant_a):
    client = client_for(make_key(tenant_a, "admin"))
    response = client.post(
        "/api/v1/providers/",
        {
            "name": "local",
            "kind": "openai_compatible",
            "base_url": "http://127.0.0.1:11434/v1",
            "api_key": "sk-very-secret",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    provider = response.json()
    assert "api_key" not in provider
    assert provider["has_api_key"] is True
    assert "sk-very-secret" not in response.content.decode()
    assert LLMProvider.objects.unscoped().get(pk=provider["id"]).api_key == "sk-very-secret"
    response = client.post(
        "/api/v1/model-profiles/",
        {"provider": provider["id"], "model": "llama3", "context_window": 8192, "max_output_tokens": 1024},
        format="json",
    )
    assert response.status_code == 201, response.content
    model_id = response.json()["id"]
    response = client.post(
        "/api/v1/agents/", {"slug": "helper", "name": "Helper", "model": model_id}, format="json"
    )
    assert response.status_code == 201, response.content
    response = client.post(
        "/api/v1/agents/", {"slug": "helper", "name": "Again", "model": model_id}, format="json"
    )
    assert response.status_code == 400
    assert "slug" in response.json()["error"]["fields"]
    response = client.patch("/api/v1/agents/helper/", {"description": "Helps."}, format="json")
    assert response.status_code == 200
    assert response.json()["description"] == "Helps."
    response = client.put("/api/v1/agents/helper/files/SOUL.md/", {"content": "Be kind."}, format="json")
    assert response.status_code == 200, response.content
    assert client.get("/api/v1/agents/helper/files/SOUL.md/").json()["content"] == "Be kind."
    revisions = client.get("/api/v1/agents/helper/revisions/").json()["results"]
    assert [r["number"] for r in revisions] == [3, 2, 1]
    restored = client.post("/api/v1/agents/helper/revisions/1/restore/")
    assert restored.status_code == 200, restored.content
    assert Agent.objects.unscoped().get(tenant=tenant_a.tenant, slug="helper").description == ""
    response = client.delete(f"/api/v1/model-profiles/{model_id}/")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "in_use"
    actions = set(
        AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).values_list("action", flat=True)
    )
    assert {
        "llmprovider.created",
        "modelprofile.created",
        "agent.created",
        "agent.changed",
        "agentfile.saved",
    } <= actions
    labels = set(
        AuditEvent.objects.unscoped().filter(action="agent.changed").values_list("actor_label", flat=True)
    )
    assert any(label.startswith("api key") for label in labels)


def test_messages_in_async_wait_and_stream_modes(live_agent, fake_llm, inline_runs):
    client = client_for(make_key(live_agent, "write"))
    session = client.post("/api/v1/sessions/", {"agent": "assistant", "title": "api"}, format="json").json()
    fake_llm.script(FakeTurn(text="Waited reply."))
    response = client.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"text": "hi", "mode": "wait"}, format="json"
    )
    assert response.status_code == 200
    run = body_of(response)
    assert (run["status"], run["reply"]) == ("completed", "Waited reply.")

    fake_llm.script(FakeTurn(text="Streamed reply, in several chunks.", chunk_size=3))
    response = client.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"text": "again", "mode": "stream"}, format="json"
    )
    assert response["Content-Type"] == "text/event-stream"
    text = b"".join(response).decode()
    assert "event: run.created" in text
    assert "event: run.completed" in text
    assert "Streamed reply" in text

    fake_llm.script(FakeTurn(text="Async reply."))
    response = client.post(f"/api/v1/sessions/{session['id']}/messages/", {"text": "third"}, format="json")
    assert response.status_code == 202
    run_id = response.json()["id"]
    import time

    deadline = time.monotonic() + 10
    while Run.objects.unscoped().get(pk=run_id).status != RunStatus.COMPLETED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.get(f"/api/v1/runs/{run_id}/").json()["reply"] == "Async reply."
    events = client.get(f"/api/v1/runs/{run_id}/events/?after=1").json()
    assert events[0]["seq"] == 2
    assert events[-1]["type"] == "run.completed"
    messages = client.get(f"/api/v1/sessions/{session['id']}/messages/").json()["results"]
    assert [m["role"] for m in messages][:2] == ["user", "assistant"]
    assert client.post(f"/api/v1/sessions/{session['id']}/undo/").json() == {"turn": 3}
    assert client.post(f"/api/v1/sessions/{session['id']}/redo/").json() == {"turn": 3}
    assert client.post(f"/api/v1/sessions/{session['id']}/redo/").status_code == 409
    usage = client.get("/api/v1/usage/?group_by=agent,model").json()
    assert usage["results"]
    assert usage["results"][0]["agent"] == "assistant"
