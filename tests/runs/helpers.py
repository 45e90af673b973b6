"""Helpers the run tests share."""

from __future__ import annotations

import time

from agents.actions.conversation import do_create_session
from agents.models import Run


def new_session(ts):
    return do_create_session(ts.agent, user=ts.member, title="set")


def fresh(run) -> Run:
    return Run.objects.unscoped().get(pk=run.pk)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
