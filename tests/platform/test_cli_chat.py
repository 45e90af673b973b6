"""`claw chat` holds a multi-turn conversation with tool calls against an
OpenAI-compatible server given by URL (here the fake LLM), as a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from agents.models import Message, Session, UsageRecord
from tests.fakes.fake_llm import Turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def database_url_for_tests() -> str:
    from urllib.parse import quote

    s = connection.settings_dict
    password = quote(str(s.get("PASSWORD") or ""), safe="")
    return f"postgresql://{s['USER']}:{password}@/{s['NAME']}?host={s['HOST']}&port={s['PORT'] or 5432}"


def run_chat(args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "claw_platform.cli.main", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_claw_chat_talks_to_a_server_given_by_url_with_tool_calls(tenant_a, fake_llm):
    fake_llm.script(
        Turn(text="Let me check the time.", tool_calls=[("get_current_time", {"timezone": "UTC"})]),
        Turn(text="It is late enough for tea."),
        Turn(text="Tea is a fine idea."),
    )
    result = run_chat(
        ["--tenant", "tenant-a", "--base-url", fake_llm.openai_base_url, "--model", "fake-model"],
        "what time is it?\nshould I have tea?\n/status\n",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Let me check the time." in out
    assert "⚙ get_current_time" in out
    assert "It is late enough for tea." in out
    assert "Tea is a fine idea." in out
    assert "Model: cli:fake-model" in out
    # The second turn carried the first (tool call and result included) as history.
    second = fake_llm.requests[-1].json["messages"]
    assert any(m.get("role") == "tool" for m in second)
    session = Session.objects.unscoped().filter(channel="cli").get()
    assert session.tenant_id == tenant_a.tenant.pk
    roles = list(
        Message.objects.unscoped().filter(session=session).order_by("seq").values_list("role", flat=True)
    )
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert UsageRecord.objects.unscoped().filter(session=session).count() == 3


def test_claw_chat_reports_a_provider_outage_readably(tenant_a, fake_llm):
    fake_llm.script(*[Turn.http_error(401, message="invalid api key") for _ in range(1)])
    result = run_chat(
        ["--tenant", "tenant-a", "--base-url", fake_llm.openai_base_url, "--model", "fake-model"], "hello\n"
    )
    assert result.returncode == 0, result.stderr
    assert "error:" in result.stdout
    assert "invalid api key" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_claw_chat_says_when_there_is_no_agent(tenant_a):
    result = run_chat(["--tenant", "tenant-a", "--agent", "nobody"], "")
    assert result.returncode == 1
    assert "no agent 'nobody'" in result.stderr
