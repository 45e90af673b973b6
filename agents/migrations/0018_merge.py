"""Joins the three 0017 migrations made side by side (heartbeat notices, memory tenant
search, memory review); no change of its own."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0017_agent_heartbeat_notify"),
        ("agents", "0017_memory_review"),
        ("agents", "0017_memory_tenant_search"),
    ]

    operations = []
