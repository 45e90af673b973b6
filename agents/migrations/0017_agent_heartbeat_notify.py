from django.db import migrations, models


class Migration(migrations.Migration):
    """Where a heartbeat's finding is told (C8): the Heartbeat chat, and the user's
    linked chat accounts on the agent's channels."""

    dependencies = [
        ("agents", "0016_merge"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="heartbeat_notify",
            field=models.CharField(
                choices=[
                    ("session", "The user's Heartbeat chat only"),
                    (
                        "linked",
                        "The Heartbeat chat and the user's linked chat accounts on this agent's channels",
                    ),
                    (
                        "linked_email",
                        "The Heartbeat chat, the user's linked chat accounts and their e-mail address "
                        "(sent by this agent's e-mail channel)",
                    ),
                ],
                default="linked",
                help_text="Where a finding is told: always the user's Heartbeat chat; with 'linked', also "
                "each chat account (Telegram, Slack, email …) the user linked on this agent's channels; with "
                "'linked_email', also the user's e-mail address, through the agent's e-mail channel.",
                max_length=16,
            ),
        ),
    ]
