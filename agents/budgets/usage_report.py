"""Usage reports (O2): calls, tokens and cost grouped by day, agent, user, model, API
key and routine over a period, read from the daily rollup (:class:`UsageDay`), never
from the raw usage rows.

One function answers the API (``/api/v1/usage/``, JSON and ``?format=csv``) and the
report page (``/reports/usage/``), so the page's tables, its chart and every CSV
export carry the same figures. Days are the tenant's (its time zone when the calls
were recorded). A member sees only their own calls (the member rule).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from claw_platform.tenancy.member_rule import Caller

# Each dimension: the label it is reported by, the join that names it, and the
# rollup column it groups on. A deleted agent, user, key or routine is reported as
# its number ("#12"): its history stays.
DIMENSIONS: dict[str, tuple[str, str, str]] = {
    "day": ("u.day", "", "u.day"),
    "agent": (
        "COALESCE(a.slug, '#' || u.agent_id::text)",
        "LEFT JOIN agents_agent a ON a.id = u.agent_id",
        "u.agent_id",
    ),
    "user": (
        "COALESCE(p.username, '#' || u.user_id::text)",
        "LEFT JOIN {users} p ON p.id = u.user_id",
        "u.user_id",
    ),
    "model": ("u.model", "", "u.model"),
    "key": (
        "COALESCE(k.name || ' (claw_' || k.prefix || ')', '#' || u.api_key_id::text)",
        "LEFT JOIN api_apikey k ON k.id = u.api_key_id",
        "u.api_key_id",
    ),
    "routine": (
        "COALESCE(r.name, '#' || u.routine_id::text)",
        "LEFT JOIN agents_routine r ON r.id = u.routine_id",
        "u.routine_id",
    ),
}
MEASURES = ("calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost")
MAX_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class UsageQuery:
    since: date
    until: date  # included
    groups: tuple[str, ...]
    agent_id: int | None = None


def parse_groups(value: str) -> list[str]:
    """``"agent,day"`` as a list of known dimensions; ValueError naming them otherwise."""
    groups = [g.strip() for g in value.split(",") if g.strip()]
    if not groups or any(g not in DIMENSIONS for g in groups):
        raise ValueError("Use one or more of " + ", ".join(DIMENSIONS) + ".")
    return list(dict.fromkeys(groups))


def usage_rows(caller: Caller, query: UsageQuery) -> list[dict[str, Any]]:
    """The grouped figures, ordered by the groups (at most ``MAX_ROWS`` rows)."""
    users = connection.ops.quote_name(get_user_model()._meta.db_table)
    labels = [f"{DIMENSIONS[g][0]} AS {connection.ops.quote_name(g)}" for g in query.groups]
    joins = " ".join(DIMENSIONS[g][1].format(users=users) for g in query.groups if DIMENSIONS[g][1])
    keys = [DIMENSIONS[g][2] for g in query.groups]
    sums = ", ".join(f"SUM(u.{m}) AS {m}" for m in MEASURES)
    where = ["u.tenant_id = %(tenant)s", "u.day >= %(since)s", "u.day <= %(until)s"]
    params: dict[str, Any] = {"tenant": caller.tenant_id, "since": query.since, "until": query.until}
    if not caller.sees_every_session:
        # A member: their own calls only (none at all without a user).
        where.append("u.user_id = %(user)s")
        params["user"] = caller.user_id if caller.user_id is not None else -1
    if query.agent_id is not None:
        where.append("u.agent_id = %(agent)s")
        params["agent"] = query.agent_id
    group_by = ", ".join([*keys, *(DIMENSIONS[g][0] for g in query.groups)])
    order = ", ".join(f"{n} NULLS FIRST" for n in range(1, len(query.groups) + 1))
    sql = (
        f"SELECT {', '.join(labels)}, {sums} FROM budgets_usageday u {joins} "  # noqa: S608 (fixed fragments)
        f"WHERE {' AND '.join(where)} GROUP BY {group_by} ORDER BY {order} LIMIT {MAX_ROWS}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c.name for c in cursor.description or ()]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        for m in MEASURES:
            row[m] = row[m] if row[m] is not None else (Decimal(0) if m == "cost" else 0)
        row["cost"] = Decimal(row["cost"]).quantize(Decimal("0.000001"))
    return rows


def totals(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {m: 0 for m in MEASURES}
    out["cost"] = Decimal(0)
    for row in rows:
        for m in MEASURES:
            out[m] += row[m]
    return out


def csv_lines(groups: Sequence[str], rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The rows as CSV, a line at a time (header first); cells a spreadsheet would
    run as formulas are quoted with a leading apostrophe."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = [*groups, *MEASURES]
    writer.writerow(columns)
    yield _take(buffer)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
        yield _take(buffer)


def _take(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    text = value.isoformat() if isinstance(value, date) else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
    except ArithmeticError:
        return False
    return True
