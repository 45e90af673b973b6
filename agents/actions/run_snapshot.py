"""A settled run and its turn, as committed, carried in the settle notification.

The worker NOTIFYs ``claw_run_settled`` in the transaction that finishes (or pauses)
a run. When the run's and its turn's rows fit in the notification, they travel with
it, so a waiting API call answers from them instead of reading the rows back (a
thread hand-off and a query, the largest step between the run's commit and the
response). Every concrete field is carried and restored with the field's own
``to_python``, so the instances are what a read of the committed rows would give.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
from django.db import DEFAULT_DB_ALIAS, models

from agents.models import Run, Turn

# PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; the run id and a colon
# go in front of the snapshot.
MAX_PAYLOAD_BYTES = 7900


def settle_payload(run: Run) -> str:
    """``"<id>:<snapshot>"``, or ``"<id>"`` when the rows do not fit. ``run.turn``
    must hold the committed turn (selected with the run)."""
    try:
        # orjson writes datetimes, dates, times and UUIDs as isoformat() and str() do.
        snapshot = orjson.dumps({"run": _row(run), "turn": _row(run.turn)}, default=_encode)
    except TypeError:
        # A value with no JSON form must not fail the run's settle: waiters read the rows.
        return str(run.pk)
    payload = b"%d:%s" % (run.pk, snapshot)
    return payload.decode() if len(payload) <= MAX_PAYLOAD_BYTES else str(run.pk)


def run_from_snapshot(snapshot: str) -> Run:
    """The Run (with its turn cached) a snapshot describes."""
    rows = orjson.loads(snapshot)
    run = _instance(Run, rows["run"])
    run.turn = _instance(Turn, rows["turn"])
    return run


def _row(instance: models.Model) -> dict[str, Any]:
    return {f.attname: f.value_from_object(instance) for f in instance._meta.concrete_fields}


def _instance(model: type[models.Model], row: dict[str, Any]) -> Any:
    fields = model._meta.concrete_fields
    values = [f.to_python(row[f.attname]) for f in fields]
    return model.from_db(DEFAULT_DB_ALIAS, [f.attname for f in fields], values)


def _encode(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"cannot carry {type(value).__name__} in a settle notification")
