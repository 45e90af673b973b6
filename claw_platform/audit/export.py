"""The audit trail as JSON Lines or CSV (Z3), streamed: rows are read in batches by
id, so a large export never sits in memory. Used by ``/api/v1/audit/export/`` and
the admin's export links."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from claw_platform.audit.models import AuditEvent

BATCH = 1000
COLUMNS = (
    "id",
    "created_at",
    "tenant_id",
    "actor_id",
    "actor_label",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "ip",
    "diff",
)
FORMATS = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}


def export_rows(
    tenant_id: int | None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    action: str = "",
    all_tenants: bool = False,
) -> Iterator[dict[str, Any]]:
    """The tenant's events oldest first (``all_tenants``: every row, superusers)."""
    rows = AuditEvent._base_manager.all()
    if not all_tenants:
        rows = rows.filter(tenant_id=tenant_id) if tenant_id is not None else rows.none()
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    if action:
        rows = rows.filter(action=action)
    last = 0
    while True:
        batch = list(rows.filter(id__gt=last).order_by("id").values(*COLUMNS)[:BATCH])
        if not batch:
            return
        for row in batch:
            row["created_at"] = row["created_at"].isoformat()
            yield row
        last = batch[-1]["id"]


def jsonl_lines(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    for row in rows:
        yield (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()


def _cell(value: Any) -> str:
    text = (
        json.dumps(value, ensure_ascii=False, sort_keys=True)
        if isinstance(value, dict | list)
        else str(value if value is not None else "")
    )
    # A spreadsheet would run a cell starting like a formula (CSV injection).
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_lines(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for count, row in enumerate(rows, 1):
        writer.writerow([_cell(row[column]) for column in COLUMNS])
        if count % 200 == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def render(fmt: str, rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    return jsonl_lines(rows) if fmt == "jsonl" else csv_lines(rows)
