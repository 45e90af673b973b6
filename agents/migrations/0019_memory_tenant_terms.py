"""Recall's text half under row-level security (issue 25, the honest bench): as the
runtime role the planner may not search the GIN index on (tenant, search_vector) by
the words (``@@`` is not leakproof, so it waits for the policy ``claw_tenant``); a
covering index serves each word's newest matches of the tenant as an index-only scan."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0018_merge"),
        ("tenancy", "0003_audit_retention_has_a_database_default"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                fields=["tenant", "id"],
                include=("scope", "agent", "user", "category", "search_vector"),
                name="memory_tenant_terms",
            ),
        ),
    ]
