"""One UPDATE for many rows' new values (``UPDATE … FROM unnest(…)``).

Django's ``bulk_update`` builds a ``CASE WHEN id = … THEN …`` per row and field: for
the scheduler's batches (hundreds of routines and fires) compiling it cost more CPU
than the rest of planning and starting them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models


def update_rows(model: type[models.Model], rows: Sequence[models.Model], fields: Sequence[str]) -> int:
    """Write ``fields`` of ``rows`` (saved instances of ``model``) in one statement;
    returns how many rows it updated. No signals, no ``auto_now`` (as ``bulk_update``)."""
    if not rows:
        return 0
    meta = model._meta
    pk: Any = meta.pk
    columns: list[Any] = [meta.get_field(name) for name in fields]
    names: list[str] = [pk.column] + [field.column for field in columns]
    # A foreign key's column has its target's type (``rel_db_type``).
    types: list[str] = [pk.db_type(connection)] + [
        field.target_field.rel_db_type(connection) if field.is_relation else field.db_type(connection)
        for field in columns
    ]
    arrays = [[pk.get_db_prep_save(row.pk, connection) for row in rows]] + [
        [field.get_db_prep_save(getattr(row, field.attname), connection) for row in rows] for field in columns
    ]
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    assignments = ", ".join(f"{quote(name)} = v.{quote(name)}" for name in names[1:])
    unnest = ", ".join(f"%s::{kind}[]" for kind in types)
    values = ", ".join(quote(name) for name in names)
    sql = (
        f"UPDATE {table} SET {assignments} FROM unnest({unnest}) AS v({values}) "  # noqa: S608
        f"WHERE {table}.{quote(pk.column)} = v.{quote(pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, arrays)
        return int(cursor.rowcount)
