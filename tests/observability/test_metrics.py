"""/metrics (O5): Prometheus text, summed across processes (a run a worker process
executed is counted), behind a bearer token or an address allow-list."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from agents.actions.runs import do_send_message
from agents.budgets.errors import BudgetRefused
from agents.budgets.guard import reserve
from agents.budgets.models import Budget
from agents.budgets.scope import Charge
from agents.engine.cost import ModelPrice
from agents.models import Run
from claw_platform.observability.metrics_access import metrics_token
from claw_platform.observability.models import Span
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.platform.test_cli_chat import database_url_for_tests
from tests.runs.helpers import new_session

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def scrape(client: Client | None = None) -> dict[tuple[str, tuple], float]:
    client = client or Client()
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token()}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    values: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def value(values: dict, name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_need_the_bearer_token(client):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token()}").status_code == 200
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token()}").status_code == 405


def test_an_allowed_address_reads_them_without_a_token(client, settings):
    settings.CLAW_METRICS_ALLOW = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401
    assert (
        client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    )


def test_the_token_is_made_once_and_kept_private(tmp_path):
    token = metrics_token(tmp_path)
    assert token.startswith("claw_metrics_")
    assert metrics_token(tmp_path) == token
    assert (tmp_path / "metrics_token").stat().st_mode & 0o077 == 0
    assert metrics_token(tmp_path, rotate=True) != token


def test_budget_refusals_and_the_queue_are_counted(live_agent):
    before = scrape()
    # A real refusal by the cost guard: a spent budget refuses the next call.
    Budget.objects.unscoped().create(tenant=live_agent.tenant, limit=Decimal("0"), period="month")
    charge = Charge(
        tenant_id=live_agent.tenant.pk, user_id=live_agent.member.pk, agent_ids=(live_agent.agent.pk,)
    )
    with pytest.raises(BudgetRefused):
        reserve(
            charge,
            model="m",
            price=ModelPrice.per_million(input=10, output=10),
            input_tokens=10,
            max_output_tokens=10,
        )
    do_send_message(new_session(live_agent), "queued, never run", acting_user=live_agent.member)
    after = scrape()
    assert (
        value(after, "claw_budget_refusals_total", reason="budget_exceeded")
        == value(before, "claw_budget_refusals_total", reason="budget_exceeded") + 1
    )
    assert value(after, "claw_run_queue_depth") >= 1
    assert value(after, "claw_active_sessions") >= 1


@pytest.mark.slow
def test_a_run_executed_in_a_worker_process_is_counted(live_agent, fake_llm):
    fake_llm.script(FakeTurn(text="Done in the worker.", model="fake-model-x"))
    before = scrape()
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "PYTHONPATH": str(ROOT)}
    assert env["PROMETHEUS_MULTIPROC_DIR"]  # the same files as this process reads
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        run = do_send_message(new_session(live_agent), "hi", acting_user=live_agent.member)
        deadline = time.monotonic() + 60
        while Run.objects.unscoped().get(pk=run.pk).status != "completed":
            assert process.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker did not run the run"
            time.sleep(0.1)
        # The worker counts the run once its trace is stored, just after it settles.
        while time.monotonic() < deadline:
            after = scrape()
            if value(after, "claw_runs_total", status="completed") > value(
                before, "claw_runs_total", status="completed"
            ):
                break
            time.sleep(0.1)
        assert (
            value(after, "claw_runs_total", status="completed")
            == value(before, "claw_runs_total", status="completed") + 1
        )
        chat = Span.objects.unscoped().get(run_id=run.pk, kind="chat")
        provider = chat.attributes["gen_ai.provider.name"]
        labels = {"provider": provider, "model": "fake-model-x"}
        assert (
            value(after, "claw_llm_calls_total", status="ok", **labels)
            == value(before, "claw_llm_calls_total", status="ok", **labels) + 1
        )
        assert value(after, "claw_llm_tokens_total", direction="input", **labels) >= 10
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
