from django.db import migrations, models


class Migration(migrations.Migration):
    """Heartbeat calls are recorded as usage rows of their own purpose."""

    dependencies = [
        ("agents", "0014_merge"),
    ]

    operations = [
        migrations.AlterField(
            model_name="usagerecord",
            name="purpose",
            field=models.CharField(
                choices=[
                    ("agent_loop", "Agent loop"),
                    ("compaction", "Compaction"),
                    ("title", "Title"),
                    ("summary", "Summary"),
                    ("flush", "Memory flush"),
                    ("sub_agent", "Sub-agent"),
                    ("delegate", "Consulted agent"),
                    ("embedding", "Embedding"),
                    ("reflection", "Memory reflection"),
                    ("heartbeat", "Heartbeat"),
                ],
                default="agent_loop",
                max_length=16,
            ),
        ),
    ]
