"""The rate limits' state (claw_platform.api.rate_limit): UNLOGGED, like the cache,
because losing it only refills the callers' budgets."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("api", "0003_key_change_notify")]

    operations = [
        migrations.RunSQL(
            "CREATE UNLOGGED TABLE claw_rate_limit ("
            " key text PRIMARY KEY, tat double precision NOT NULL, allowed boolean NOT NULL)",
            "DROP TABLE claw_rate_limit",
        )
    ]
