"""THE FAULT TEST (R1): a real ``claw_worker`` is SIGKILLed after a side-effecting
tool call reached a local HTTP sink and before the call was confirmed finished; a
second worker resumes the run from its last step and finishes it, and the sink
counted the call exactly once (it is reported to the model as interrupted)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Message, Run, RunStatus
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.platform.test_cli_chat import database_url_for_tests
from tests.runs.helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def start_worker() -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_tests(),
        "CLAW_RUN_TOOLS_FACTORY": "tests.runs.tools.sink_tools",
        "CLAW_RUN_LEASE_SECONDS": "3",
        "CLAW_RUN_SWEEP_SECONDS": "1",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "claw_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the cluster's children die with it
    )


def stop_worker(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
    # Children of the group that outlived their parent.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def test_a_killed_worker_s_run_is_resumed_elsewhere_and_the_side_effect_happens_once(
    live_agent, fake_llm, sink
):
    fake_llm.script(
        FakeTurn(tool_calls=[("post_to_sink", {"url": sink.url, "note": "hi", "linger": 120}, "call_post")]),
        FakeTurn(text="The post was interrupted, so I did not repeat it."),
    )
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    run = do_send_message(session, "post a note", acting_user=live_agent.member)
    assert run is not None

    first = start_worker()
    try:
        assert wait_for(lambda: sink.count == 1, timeout=45), "the first worker never called the sink"
    finally:
        stop_worker(first, signal.SIGKILL)
    assert Run.objects.unscoped().get(pk=run.pk).status == RunStatus.RUNNING

    killed_at = time.monotonic()
    second = start_worker()
    try:
        finished = wait_for(
            lambda: Run.objects.unscoped().get(pk=run.pk).status not in (RunStatus.RUNNING, RunStatus.QUEUED),
            timeout=60,
        )
    finally:
        stop_worker(second)
    assert finished, "the run was not finished within 60 s of the crash"
    recovered_in = time.monotonic() - killed_at
    final = Run.objects.unscoped().get(pk=run.pk)
    assert final.status == RunStatus.COMPLETED, final.error
    assert final.attempt == 2
    assert sink.count == 1
    assert recovered_in < 60
    tool_results = [
        p
        for parts in Message.objects.unscoped().filter(turn_id=run.turn_id).values_list("parts", flat=True)
        for p in parts
        if p.get("type") == "tool_result"
    ]
    assert len(tool_results) == 1
    assert "interrupt" in str(tool_results[0]).lower()
