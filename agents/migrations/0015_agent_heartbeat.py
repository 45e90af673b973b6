import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    """The periodic heartbeat (C8): its settings on the agent, a routine action and a
    usage purpose of its own."""

    dependencies = [
        ("agents", "0014_merge"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="heartbeat_enabled",
            field=models.BooleanField(
                default=False,
                help_text="Check HEARTBEAT.md (the agent's and each user's) every interval; the user is told "
                "only when something needs attention.",
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="heartbeat_interval_minutes",
            field=models.PositiveIntegerField(
                default=30,
                help_text="Minutes between heartbeats (default 30, as IronClaw and OpenClaw).",
                validators=[
                    django.core.validators.MinValueValidator(5),
                    django.core.validators.MaxValueValidator(1440),
                ],
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="heartbeat_active_start",
            field=models.TimeField(
                blank=True,
                null=True,
                help_text="Active hours, in the agent's time zone: heartbeats run from this time … "
                "(empty: all day).",
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="heartbeat_active_end",
            field=models.TimeField(
                blank=True,
                null=True,
                help_text="… until this time (may be past midnight, e.g. 22:00 to 06:00; empty: all day).",
            ),
        ),
        migrations.AlterField(
            model_name="routine",
            name="action",
            field=models.CharField(
                choices=[
                    ("agent", "Agent prompt (full run in a session)"),
                    ("light", "Light run (fresh session, no history)"),
                    ("shell", "Shell command (sandboxed, gated)"),
                    ("heartbeat", "Heartbeat (the agent's HEARTBEAT.md check, from its settings)"),
                ],
                default="agent",
                max_length=16,
            ),
        ),
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
