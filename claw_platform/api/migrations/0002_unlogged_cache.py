"""The cache table holds only what may be lost (rate-limit windows, lock-outs):
UNLOGGED spares every write a WAL flush (claw_platform.cache)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("api", "0001_initial")]

    operations = [
        migrations.RunSQL("ALTER TABLE claw_cache SET UNLOGGED", "ALTER TABLE claw_cache SET LOGGED"),
    ]
