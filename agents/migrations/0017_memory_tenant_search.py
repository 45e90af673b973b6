"""The full-text index of memories carries the tenant (btree_gin): recall's keyword half
(``agents.memory.recall``) finds one tenant's matching rows in one index scan."""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0016_merge"),
    ]

    operations = [
        # A trusted extension (PostgreSQL 13+): the database owner may create it.
        BtreeGinExtension(),
        migrations.AddIndex(
            model_name="memoryentry",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["tenant", "search_vector"], name="memory_tenant_search"
            ),
        ),
        migrations.RemoveIndex(
            model_name="memoryentry",
            name="memory_search_vector",
        ),
    ]
