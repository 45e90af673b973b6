# The tools app's first migration: a common root for the tool, hook, MCP, HTTP-tool
# and skill tables, which come in migrations of their own.
from django.db import migrations


class Migration(migrations.Migration):
    initial = True
    dependencies = [("agents", "0003_runs")]
    operations: list = []
