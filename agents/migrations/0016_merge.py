from django.db import migrations


class Migration(migrations.Migration):
    """Joins the periodic heartbeat (agent settings, routine kind) and the heartbeat's
    usage purpose, which both added a 0015."""

    dependencies = [
        ("agents", "0015_agent_heartbeat"),
        ("agents", "0015_usagerecord_purpose_heartbeat"),
    ]

    operations: list = []
