"""The full-text index of memories carries the tenant (btree_gin): recall's keyword half
(``agents.memory.recall``) finds one tenant's matching rows in one index scan; the exact
vector scan of a tenant reads its 256-d vectors from a covering index (index-only). And the
planner learns that an agent belongs to one tenant: without these statistics it
multiplies the two selectivities (1 % x 1 %) and expects 108 of a tenant's 10,000
memories (measured on 1,000,000 rows)."""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations, models


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
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("embedding_dim", 256)),
                fields=["tenant", "embedding_dim"],
                include=["id", "scope", "agent", "user", "category", "embedding"],
                name="memory_tenant_vectors_256",
            ),
        ),
        migrations.RunSQL(
            "CREATE STATISTICS memory_owner_stats (dependencies, ndistinct, mcv) "
            "ON tenant_id, scope, agent_id FROM agents_memoryentry; ANALYZE agents_memoryentry",
            "DROP STATISTICS IF EXISTS memory_owner_stats",
        ),
    ]
