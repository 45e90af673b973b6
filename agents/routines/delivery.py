"""Where a routine's output goes (C6).

An agent routine's run answers in its session: the reply is stored there and pushed
live to every open chat of that session by the run itself, so nothing more is needed
for session delivery. Other destinations register a deliverer here (the chat
platforms' adapters: ``register_deliverer("telegram", fn)``); each registered
deliverer is called with the settled RoutineRun after its transaction commits, and
decides itself whether the routine asks for it. A deliverer's failure is logged and
never changes the run's outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agents.models import RoutineRun

logger = logging.getLogger("claw.routines.delivery")

Deliverer = Callable[[RoutineRun], None]
_deliverers: dict[str, Deliverer] = {}


def register_deliverer(name: str, deliverer: Deliverer) -> None:
    _deliverers[name] = deliverer


def deliver(routine_run_id: int) -> None:
    if not _deliverers:
        return
    row = RoutineRun._base_manager.select_related("routine").filter(pk=routine_run_id).first()
    if row is None:
        return
    for name, deliverer in list(_deliverers.items()):
        try:
            deliverer(row)
        except Exception:
            logger.exception("routine run %s: delivery %s failed", routine_run_id, name)
