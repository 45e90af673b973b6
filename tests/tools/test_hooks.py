"""H1-H3: hooks of every kind, run for real, in priority order, with patches, blocks,
fail-closed timeouts and an audit row for every outcome."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import pytest

from agents.engine.interfaces import ALLOW, HookOutcome, NullHookRunner
from claw_platform.audit.models import AuditEvent
from tests.tools import hook_callables
from tests.tools.helpers import ctx_for
from tests.tools.servers.local_http import LocalServer
from tools_app.actions.extensions import do_allow_host, do_create_hook
from tools_app.guards.ssrf import EMPTY_ALLOW_LIST, AllowList, SsrfGuard
from tools_app.hooks.callables import READY_MADE, registered_callables
from tools_app.hooks.kinds import sign_webhook
from tools_app.hooks.runner import ConfiguredHookRunner, HookSpec, clamp_timeout_ms
from tools_app.models import Hook
from tools_app.runtime.assembly import tenant_hook_runner

CALLABLES = "tests.tools.hook_callables."


class RecordingAudit:
    def __init__(self) -> None:
        self.entries = []

    def record(self, entry) -> None:
        self.entries.append(entry)

    async def flush(self) -> None:
        return None


@pytest.fixture(autouse=True)
def _operator_registers_test_callables(settings):
    settings.CLAW_HOOK_CALLABLES = [
        CALLABLES + name
        for name in (
            "append_marker",
            "sync_shout",
            "block_everything",
            "patch_a_forbidden_field",
            "never_answers",
            "raises",
            "patch_system_prompt",
        )
    ]
    hook_callables.SEEN.clear()


_ids = iter(range(1, 10_000))


def spec(event="on_message_received", kind="python", **kw) -> HookSpec:
    hook_id = next(_ids)
    return HookSpec(
        id=hook_id, tenant_id=1, name=kw.pop("name", f"hook-{hook_id}"), event=event, kind=kind, **kw
    )


def runner(*hooks, allow=EMPTY_ALLOW_LIST, shell_dir=None):
    audit = RecordingAudit()
    home = shell_dir or Path(os.environ["CLAW_VAR_DIR"]) / "hooks-test"
    hook_runner = ConfiguredHookRunner(hooks, audit=audit, guard=SsrfGuard(allow), shell_dir=lambda t: home)
    return hook_runner, audit


def run(hook_runner, event, payload, ctx=None):
    async def go():
        try:
            return await hook_runner.run(event, payload, ctx or ctx_for(run_id="run-1"))
        finally:
            await hook_runner.aclose()

    return asyncio.run(go())


# ------------------------------------------------------------------ semantics


def test_no_hooks_for_an_event_allows_unchanged():
    hook_runner, audit = runner(spec(event="before_llm_call", callable=CALLABLES + "block_everything"))
    assert run(hook_runner, "on_message_received", {"text": "hi"}) is ALLOW
    assert audit.entries == []


def test_hooks_run_in_priority_order_and_see_earlier_patches():
    hook_runner, audit = runner(
        spec(name="second", priority=20, callable=CALLABLES + "append_marker", config={"marker": "B"}),
        spec(name="first", priority=10, callable=CALLABLES + "append_marker", config={"marker": "A"}),
        spec(name="third", priority=30, callable=CALLABLES + "sync_shout"),
    )
    outcome = run(hook_runner, "on_message_received", {"text": "hi", "images": 0})
    assert outcome.action == "modify"
    assert outcome.patches == {"text": "HI A B"}
    assert [s["hook"] for s in hook_callables.SEEN] == ["first", "second"]
    assert hook_callables.SEEN[1]["text"] == "hi A"
    assert [(e.hook.name, e.status, e.patched) for e in audit.entries] == [
        ("first", "modify", ("text",)),
        ("second", "modify", ("text",)),
        ("third", "modify", ("text",)),
    ]


def test_the_first_block_stops_the_chain():
    hook_runner, audit = runner(
        spec(name="gate", priority=1, callable=CALLABLES + "block_everything"),
        spec(name="later", priority=2, callable=CALLABLES + "append_marker", config={"marker": "X"}),
    )
    outcome = run(hook_runner, "on_message_received", {"text": "hi"})
    assert outcome.blocked
    assert outcome.reason == "gate says no"
    assert hook_callables.SEEN == []
    assert [e.status for e in audit.entries] == ["block"]


def test_a_patch_the_event_does_not_allow_is_a_failure_and_blocks_by_default():
    hook_runner, audit = runner(spec(name="sneaky", callable=CALLABLES + "patch_a_forbidden_field"))
    outcome = run(hook_runner, "on_message_received", {"text": "hi"})
    assert outcome.blocked
    assert "sneaky hook failed" in outcome.reason
    assert "tenant_id" in outcome.reason
    assert audit.entries[0].status == "error"
    assert audit.entries[0].effect == "block"


@pytest.mark.parametrize("name", ["raises", "patch_a_forbidden_field"])
def test_on_error_allow_lets_a_failing_hook_pass(name):
    hook_runner, audit = runner(spec(callable=CALLABLES + name, on_error="allow"))
    assert run(hook_runner, "on_message_received", {"text": "hi"}) is ALLOW
    assert audit.entries[0].status == "error"
    assert audit.entries[0].effect == "allow"


def test_a_hook_that_times_out_blocks_by_default():
    hook_runner, audit = runner(
        spec(name="slow", event="before_tool_call", callable=CALLABLES + "never_answers", timeout_ms=50)
    )
    started = time.monotonic()
    outcome = run(hook_runner, "before_tool_call", {"id": "c1", "name": "calculate", "arguments": {}})
    assert time.monotonic() - started < 2
    assert outcome.blocked
    assert "timed out after 50 ms" in outcome.reason
    assert audit.entries[0].status == "error"
    assert Hook._meta.get_field("on_error").default == "block"


def test_a_callable_the_operator_no_longer_registers_is_refused(settings):
    settings.CLAW_HOOK_CALLABLES = []
    hook_runner, _ = runner(spec(callable=CALLABLES + "append_marker", config={"marker": "A"}))
    outcome = run(hook_runner, "on_message_received", {"text": "hi"})
    assert outcome.blocked
    assert "internal error" in outcome.reason
    assert hook_callables.SEEN == []


def test_timeouts_are_clamped_between_10_ms_and_120_s():
    assert clamp_timeout_ms(0) == 10
    assert clamp_timeout_ms(1) == 10
    assert clamp_timeout_ms(5_000) == 5_000
    assert clamp_timeout_ms(10**9) == 120_000
    assert spec(timeout_ms=1).timeout == 0.01


# ------------------------------------------------------------------------ shell


def test_a_shell_hook_gets_json_on_stdin_and_the_event_in_its_environment(tmp_path):
    command = (
        'cat > payload.json; grep -q \'"text": "ping"\' payload.json || exit 7; '
        'printf \'{"action": "modify", "patches": {"text": "%s via %s"}}\' "$CLAW_HOOK_EVENT" "$CLAW_HOOK_NAME"'
    )
    hook_runner, _audit = runner(spec(name="sh-hook", kind="shell", command=command), shell_dir=tmp_path)
    outcome = run(hook_runner, "on_message_received", {"text": "ping"})
    assert outcome.patches == {"text": "on_message_received via sh-hook"}
    payload = json.loads((tmp_path / "payload.json").read_text())
    assert payload["event"] == "on_message_received"
    assert payload["hook"] == "sh-hook"
    assert payload["context"]["run_id"] == "run-1"


def test_a_shell_hook_never_sees_the_products_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-should-not-leak")
    monkeypatch.setenv("DATABASE_URL", os.environ.get("DATABASE_URL", "postgresql://x"))
    command = (
        'printf \'{"action": "block", "reason": "%s"}\' "$(env | cut -d= -f1 | sort | tr \'\\n\' \' \')"'
    )
    hook_runner, _ = runner(spec(kind="shell", command=command), shell_dir=tmp_path)
    outcome = run(hook_runner, "on_message_received", {"text": "hi"})
    names = set(outcome.reason.split())
    assert {"CLAW_HOOK_EVENT", "CLAW_HOOK_NAME", "PATH", "HOME"} <= names
    leaked = names & {"SECRET_KEY", "CLAW_SECRETS_KEY", "DATABASE_URL", "OPENAI_API_KEY", "CLAW_VAR_DIR"}
    assert not leaked
    assert names <= {
        "CLAW_HOOK_EVENT",
        "CLAW_HOOK_NAME",
        "CLAW_TENANT_ID",
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "PWD",
        "SHLVL",
        "_",
    }


def test_a_shell_hook_that_times_out_is_killed_and_blocks(tmp_path):
    command = "sleep 30 & echo $! > child.pid; wait"
    hook_runner, _audit = runner(
        spec(event="before_tool_call", kind="shell", command=command, timeout_ms=200), shell_dir=tmp_path
    )
    started = time.monotonic()
    outcome = run(hook_runner, "before_tool_call", {"id": "c1", "name": "calculate", "arguments": {}})
    assert time.monotonic() - started < 5
    assert outcome.blocked
    assert "timed out" in outcome.reason
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    assert not _alive(child), "the whole process group was killed"


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie is dead, waiting to be reaped


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("echo oops >&2; exit 3", "status 3: oops"),
        ("echo not json", "not JSON"),
        ('echo \'{"action": "maybe"}\'', "unknown action"),
    ],
)
def test_a_failing_shell_hook_is_an_error(tmp_path, command, problem):
    hook_runner, audit = runner(
        spec(event="on_message_sending", kind="shell", command=command), shell_dir=tmp_path
    )
    outcome = run(hook_runner, "on_message_sending", {"text": "reply", "status": "completed"})
    assert outcome.blocked
    assert problem in outcome.reason
    assert audit.entries[0].status == "error"


def test_a_silent_shell_hook_allows(tmp_path):
    hook_runner, audit = runner(
        spec(event="run_finished", kind="shell", command="cat > /dev/null"), shell_dir=tmp_path
    )
    assert run(hook_runner, "run_finished", {"status": "completed"}) is ALLOW
    assert audit.entries[0].status == "allow"


# ---------------------------------------------------------------------- webhook


@pytest.fixture
def receiver():
    with LocalServer() as srv:
        yield srv


def test_a_webhook_hook_is_signed_and_its_answer_applies(receiver):
    secret = "whsec-test-123"

    def answer(received):
        timestamp = received.headers["x-claw-timestamp"]
        expected = sign_webhook(secret, timestamp, received.body)
        mac = hmac.new(secret.encode(), timestamp.encode() + b"." + received.body, hashlib.sha256).hexdigest()
        assert received.headers["x-claw-signature"] == expected == f"sha256={mac}"
        body = json.loads(received.body)
        assert body["event"] == "after_tool_call"
        assert body["result"]["content"] == "42"
        return (
            200,
            json.dumps({"action": "modify", "patches": {"content": "forty-two"}}).encode(),
            "application/json",
        )

    receiver.route("POST", "/hook", handler=answer)
    hook_runner, _audit = runner(
        spec(event="after_tool_call", kind="webhook", url=receiver.url("/hook"), secret=secret),
        allow=AllowList.of([("127.0.0.1", receiver.port)]),
    )
    outcome = run(
        hook_runner,
        "after_tool_call",
        {
            "id": "c1",
            "name": "calculate",
            "arguments": {},
            "result": {"content": "42", "is_error": False, "error_type": None},
        },
    )
    assert outcome.patches == {"content": "forty-two"}
    assert receiver.received[0].headers["x-claw-event"] == "after_tool_call"
    assert abs(int(receiver.received[0].headers["x-claw-timestamp"]) - time.time()) < 10


def test_a_webhook_to_a_refused_address_fails_closed(receiver):
    receiver.route("POST", "/hook", 200, "")
    hook_runner, _audit = runner(
        spec(kind="webhook", url=receiver.url("/hook"), secret="s")
    )  # not allow-listed
    outcome = run(hook_runner, "on_message_received", {"text": "hi"})
    assert outcome.blocked
    assert "loopback" in outcome.reason
    assert not receiver.received


def test_a_webhook_error_status_is_a_failure(receiver):
    receiver.route("POST", "/hook", 500, "boom")
    hook_runner, audit = runner(
        spec(kind="webhook", url=receiver.url("/hook"), secret="s", on_error="allow"),
        allow=AllowList.of(["127.0.0.1"]),
    )
    assert run(hook_runner, "on_message_received", {"text": "hi"}) is ALLOW
    assert audit.entries[0].status == "error"
    assert "HTTP 500" in audit.entries[0].reason


# --------------------------------------------------------------- ready-made (H4)


def ready(name):
    return next(path for path in READY_MADE if path.endswith("." + name))


def test_the_ready_made_hooks_are_registered_but_off_until_a_tenant_adds_one():
    assert {p.rsplit(".", 1)[1] for p in READY_MADE} == {
        "block_bash",
        "block_global_memory",
        "filter_global_structured_memory",
        "redact_tool_output",
    }
    assert set(READY_MADE) <= set(registered_callables())


def test_block_bash_blocks_only_bash():
    hook_runner, _ = runner(spec(name="block-bash", event="before_tool_call", callable=ready("block_bash")))
    blocked = run(
        hook_runner, "before_tool_call", {"id": "1", "name": "bash", "arguments": {"command": "ls"}}
    )
    assert blocked.blocked
    assert "bash" in blocked.reason
    hook_runner, _ = runner(spec(event="before_tool_call", callable=ready("block_bash")))
    assert run(hook_runner, "before_tool_call", {"id": "1", "name": "read_file", "arguments": {}}) is ALLOW


def test_block_global_memory_blocks_shared_scopes_only():
    hooks = [spec(event="before_tool_call", callable=ready("block_global_memory"))]
    for scope, blocked in (("global", True), ("tenant", True), ("user", False), ("agent", False)):
        hook_runner, _ = runner(*hooks)
        outcome = run(
            hook_runner,
            "before_tool_call",
            {"id": "1", "name": "memory_write", "arguments": {"scope": scope}},
        )
        assert outcome.blocked is blocked, scope


def test_filter_global_structured_memory_drops_shared_lines():
    hook_runner, _ = runner(spec(event="after_tool_call", callable=ready("filter_global_structured_memory")))
    content = (
        "[user] likes tea\n[global] company secret\n  [tenant] shared note\n[agent] prefers short answers"
    )
    outcome = run(
        hook_runner,
        "after_tool_call",
        {
            "id": "1",
            "name": "memory_search",
            "arguments": {},
            "result": {"content": content, "is_error": False},
        },
    )
    assert outcome.patches == {"content": "[user] likes tea\n[agent] prefers short answers"}


def test_redact_tool_output_redacts_the_configured_tools():
    hook_runner, _ = runner(
        spec(event="after_tool_call", callable=ready("redact_tool_output"), config={"tools": ["read_*"]})
    )
    outcome = run(
        hook_runner,
        "after_tool_call",
        {
            "id": "1",
            "name": "read_file",
            "arguments": {},
            "result": {"content": "password=1", "is_error": False},
        },
    )
    assert outcome.patches == {"content": "[redacted]"}


# ----------------------------------------------------------- rows, cache, audit

pytestmark_db = pytest.mark.django_db(transaction=True)


@pytestmark_db
def test_a_tenant_without_hook_rows_has_no_hooks(tenant_a):
    assert isinstance(
        asyncio.run(tenant_hook_runner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk)),
        NullHookRunner,
    )


@pytestmark_db
def test_hook_rows_apply_to_their_tenant_and_agents_only(tenant_a, tenant_b):
    from agents.actions.config import do_create_agent

    other_agent = do_create_agent(tenant_a.tenant, slug="other", name="Other", model=tenant_a.model)
    do_create_hook(
        tenant_a.tenant,
        name="only-assistant",
        event="on_message_received",
        kind="python",
        callable=CALLABLES + "block_everything",
        agents=[tenant_a.agent],
        acting_user=tenant_a.owner,
    )
    do_create_hook(
        tenant_a.tenant,
        name="disabled",
        event="on_message_received",
        kind="python",
        callable=CALLABLES + "block_everything",
        enabled=False,
        acting_user=tenant_a.owner,
    )

    def hooks_of(tenant_set, agent):
        hook_runner = asyncio.run(tenant_hook_runner(tenant_id=tenant_set.tenant.pk, agent_id=agent.pk))
        return [h.name for h in getattr(hook_runner, "hooks", [])]

    assert hooks_of(tenant_a, tenant_a.agent) == ["only-assistant"]
    assert hooks_of(tenant_a, other_agent) == []
    assert hooks_of(tenant_b, tenant_b.agent) == []


@pytestmark_db
def test_an_admin_change_applies_to_the_next_run(tenant_a):
    def names():
        hook_runner = asyncio.run(
            tenant_hook_runner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk)
        )
        return [h.name for h in getattr(hook_runner, "hooks", [])]

    assert names() == []
    hook = do_create_hook(
        tenant_a.tenant,
        name="h",
        event="run_finished",
        kind="python",
        callable=ready("block_bash"),
        acting_user=tenant_a.owner,
    )
    assert names() == ["h"]
    hook.enabled = False
    hook.save()
    assert names() == []


@pytestmark_db
def test_every_outcome_is_audited(tenant_a, receiver):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=receiver.port, acting_user=tenant_a.owner)
    receiver.route("POST", "/hook", 200, json.dumps({"action": "allow"}), content_type="application/json")
    for name, fields in {
        "a-shout": {"kind": "python", "callable": CALLABLES + "sync_shout", "priority": 1},
        "b-webhook": {"kind": "webhook", "url": receiver.url("/hook"), "secret": "s", "priority": 2},
        "c-broken": {"kind": "python", "callable": CALLABLES + "raises", "priority": 3, "on_error": "allow"},
        "d-gate": {"kind": "python", "callable": CALLABLES + "block_everything", "priority": 4},
    }.items():
        do_create_hook(
            tenant_a.tenant, name=name, event="on_message_received", acting_user=tenant_a.owner, **fields
        )

    async def go():
        hook_runner = await tenant_hook_runner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk)
        try:
            return await hook_runner.run("on_message_received", {"text": "hi"}, ctx_for(tenant_a))
        finally:
            await hook_runner.aclose()

    outcome = asyncio.run(go())
    assert outcome == HookOutcome.block("d-gate says no")
    rows = list(AuditEvent.objects.unscoped().filter(action__startswith="hook_outcome.").order_by("id"))
    assert [(r.object_repr, r.action) for r in rows] == [
        ("a-shout", "hook_outcome.modify"),
        ("b-webhook", "hook_outcome.allow"),
        ("c-broken", "hook_outcome.error"),
        ("d-gate", "hook_outcome.block"),
    ]
    assert {r.tenant_id for r in rows} == {tenant_a.tenant.pk}
    assert rows[0].diff["event"] == "on_message_received"
    assert rows[0].diff["patched"] == ["text"]
    assert rows[0].diff["run_id"] == "r1"
    assert rows[2].diff["effect"] == "allow"
    assert "RuntimeError" in rows[2].diff["reason"]
    assert rows[3].diff["reason"] == "d-gate says no"


# ------------------------------------------------------------------- validation


@pytestmark_db
def test_rows_are_validated_by_kind(tenant_a, settings):
    from django.core.exceptions import ValidationError

    settings.CLAW_HOOKS_SHELL = False
    with pytest.raises(ValidationError, match="turned off"):
        do_create_hook(tenant_a.tenant, name="s", event="run_finished", kind="shell", command="true")
    with pytest.raises(ValidationError, match="signing secret"):
        do_create_hook(
            tenant_a.tenant, name="w", event="run_finished", kind="webhook", url="https://hooks.example/x"
        )
    with pytest.raises(ValidationError, match="operator registered"):
        do_create_hook(tenant_a.tenant, name="p", event="run_finished", kind="python", callable="os.system")
    with pytest.raises(ValidationError):
        do_create_hook(
            tenant_a.tenant,
            name="t",
            event="run_finished",
            kind="python",
            callable=ready("block_bash"),
            timeout_ms=5,
        )
    settings.CLAW_HOOKS_SHELL = True
    assert do_create_hook(tenant_a.tenant, name="s", event="run_finished", kind="shell", command="true").pk
    assert not Hook.objects.unscoped().filter(name__in=["w", "p", "t"]).exists()


@pytestmark_db
def test_a_webhook_secret_is_encrypted_at_rest_and_masked_in_the_audit(tenant_a):
    from django.db import connection

    hook = do_create_hook(
        tenant_a.tenant,
        name="w",
        event="run_finished",
        kind="webhook",
        url="https://hooks.example/x",
        secret="whsec-plaintext-value",
        acting_user=tenant_a.owner,
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM tools_app_hook WHERE id = %s", [hook.pk])
        raw = cursor.fetchone()[0]
    assert raw.startswith("fernet:")
    assert "whsec" not in raw
    created = AuditEvent.objects.unscoped().get(action="hook.created", object_id=str(hook.pk))
    assert "whsec-plaintext-value" not in json.dumps(created.diff)


@pytestmark_db
def test_shell_hooks_stop_running_when_the_operator_turns_them_off(tenant_a, settings):
    settings.CLAW_HOOKS_SHELL = True
    do_create_hook(tenant_a.tenant, name="sh", event="on_message_received", kind="shell", command="true")
    settings.CLAW_HOOKS_SHELL = False

    async def go():
        hook_runner = await tenant_hook_runner(tenant_id=tenant_a.tenant.pk, agent_id=tenant_a.agent.pk)
        try:
            return await hook_runner.run("on_message_received", {"text": "hi"}, ctx_for(tenant_a))
        finally:
            await hook_runner.aclose()

    outcome = asyncio.run(go())
    assert outcome.blocked
    assert "turned off" in outcome.reason
