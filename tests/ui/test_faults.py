"""Faults under a live browser (R1, U2, Z4): PostgreSQL restarted mid-stream and a
worker SIGKILLed mid-stream; either way the page reconnects and shows the whole
reply, and nothing is lost."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from django.db import connections

from agents.models import Run, RunStatus
from claw_platform.testing import pytest_plugin
from tests.fakes.fake_llm import Turn
from tests.ui.conftest import Stack, start_worker, stop
from tests.ui.test_chat_ui import LONG_REPLY, chat_session, open_session, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPLY = LONG_REPLY * 2


def wait_until_streaming(page: Any, chars: int = 60) -> None:
    page.wait_for_function(
        "n => { const t = document.querySelector('.assistant-text.live'); return t && t.innerText.length > n }",
        arg=chars,
    )


def assert_whole_reply(page: Any) -> None:
    page.wait_for_selector(".assistant-text:not(.live) >> text=neap tides when they do not", timeout=60_000)
    shown = page.inner_text(".assistant-msg .assistant-text")
    assert shown.count("Here is a longer answer") == 2, shown
    assert shown.rstrip().endswith("neap tides when they do not.")


def final_run(session: Any, timeout: float = 60) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        try:
            run = Run.objects.unscoped().filter(session_id=session.pk).get()
            if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING) or time.monotonic() > deadline:
                return run
        except Exception:
            connections.close_all()  # our own connection did not survive a restart
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_postgres_restarted_mid_stream_the_page_reconnects_and_shows_the_whole_reply(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any
) -> None:
    database = pytest_plugin._embedded
    if database is None:
        pytest.skip("needs the embedded test database (DATABASE_URL was given)")
    fake_llm.script(Turn(text=REPLY, chunk_delay=0.04))
    # If the outage lands on a write the stream cannot skip, the run resumes from its
    # last step and asks the model again: that second answer is the same reply.
    fake_llm.default_reply = Turn(text=REPLY, chunk_delay=0.01)
    session = chat_session(live_agent)
    page = open_session(browser, stack, live_agent, session)
    send(page, "Tides, please")
    wait_until_streaming(page)

    database.restart()
    connections.close_all()

    assert_whole_reply(page)
    run = final_run(session)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.turn.response_text.count("Here is a longer answer") == 2
    page.reload()
    assert_whole_reply(page)


def test_a_worker_killed_mid_stream_the_run_finishes_on_another_and_the_page_shows_it(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any
) -> None:
    fake_llm.script(Turn(text=REPLY, chunk_delay=0.05), Turn(text=REPLY, chunk_delay=0.01))
    session = chat_session(live_agent)
    page = open_session(browser, stack, live_agent, session)
    send(page, "Tides, please")
    wait_until_streaming(page)

    killed_at = time.monotonic()
    os.killpg(stack.worker.pid, signal.SIGKILL)
    stop(stack.worker)
    stack.worker = start_worker(stack.env, stack.logs)

    assert_whole_reply(page)
    run = final_run(session)
    assert run.status == RunStatus.COMPLETED, run.error
    # Claimed again after the kill (more than once if a busy machine let a short
    # test lease lapse: the later claim wins and the reply is still whole, once).
    assert run.attempt >= 2
    assert time.monotonic() - killed_at < 60
    # The dead attempt's half reply was replaced, not kept beside the new one.
    assert page.inner_text(".assistant-msg").count("Here is a longer answer") == 2
