from django.db import migrations


class Migration(migrations.Migration):
    """Joins the branches that each added a 0012 (attachments, memory embedders,
    routine events and delivery, usage links) into one history."""

    dependencies = [
        ("agents", "0012_chat_attachments"),
        ("agents", "0012_routine_events_and_delivery"),
        ("agents", "0012_run_api_key_usagerecord_api_key_usagerecord_routine_and_more"),
        ("agents", "0013_session_memory_reflected_at"),
    ]

    operations: list = []
