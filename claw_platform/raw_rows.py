"""Model instances from one plain SQL row that joins several tables.

The hot paths of a run (its start, its end) read a few rows by primary key. Through
the ORM each read costs more Python than the database spends answering it (the
query is built and compiled anew every time); a join written once, read with a
plain cursor, turned into instances here, costs a fraction of that.

    columns = select_list(("s", Session), ("t", Turn))   # once, at import
    session, turn = instances(row, Session, Turn)        # per row

Values go through each field's ``from_db_value`` (JSON text to objects, as the ORM
does); a model whose primary key is NULL in the row (an outer join that found
nothing) comes back as ``None``.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import Model


def select_list(*tables: tuple[str, type[Model]]) -> str:
    """The select list of every concrete column of each (alias, model), in field order."""
    return ", ".join(
        f"{alias}.{field.column}" for alias, model in tables for field in model._meta.concrete_fields
    )


def instances(row: tuple[Any, ...], *models: type[Model]) -> list[Any]:
    """One instance per model from consecutive slices of ``row`` (see :func:`select_list`)."""
    found: list[Any] = []
    start = 0
    for model in models:
        fields = model._meta.concrete_fields
        values = list(row[start : start + len(fields)])
        start += len(fields)
        pk_at = fields.index(model._meta.pk)
        if values[pk_at] is None:
            found.append(None)
            continue
        for n, field in enumerate(fields):
            convert = getattr(field, "from_db_value", None)
            if convert is not None and values[n] is not None:
                values[n] = convert(values[n], None, connection)
        found.append(model.from_db(DEFAULT_DB_ALIAS, [f.attname for f in fields], values))
    if start != len(row):
        raise ValueError(f"the row has {len(row)} columns, the models {start}")
    return found
