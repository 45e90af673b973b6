"""The PostgreSQL channel layer's tables hold live events for a minute at most:
nothing in them must survive a crash, so they skip the write-ahead log (UNLOGGED).
Every relayed token batch is a row; without WAL an insert costs no log write."""

from django.db import migrations

TABLES = ["channels_postgres_message", "channels_postgres_groupchannel"]


class Migration(migrations.Migration):
    dependencies = [
        ("ops", "0002_vector_extension"),
        ("channels_postgres", "0004_notify_ensure_payload_not_too_big"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[f"ALTER TABLE {table} SET UNLOGGED" for table in TABLES],
            reverse_sql=[f"ALTER TABLE {table} SET LOGGED" for table in TABLES],
        )
    ]
