"""Any change to an API key or a tenant NOTIFYs ``claw_api_keys`` in its transaction,
whoever makes it: web processes evict the keys they keep (claw_platform.api.key_cache)."""

from django.db import migrations

FORWARD = """
CREATE FUNCTION claw_api_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The once-a-minute note of a key's last use changes nothing a cached key says.
    IF TG_OP = 'UPDATE' AND to_jsonb(OLD) - 'last_used_at' = to_jsonb(NEW) - 'last_used_at' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('claw_api_keys', OLD.prefix);
    RETURN NULL;
END $$;
CREATE TRIGGER api_apikey_changed AFTER UPDATE OR DELETE ON api_apikey
    FOR EACH ROW EXECUTE FUNCTION claw_api_key_changed();

CREATE FUNCTION claw_api_key_tenant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('claw_api_keys', '*');
    RETURN NULL;
END $$;
CREATE TRIGGER api_tenant_changed AFTER UPDATE OR DELETE ON tenancy_tenant
    FOR EACH STATEMENT EXECUTE FUNCTION claw_api_key_tenant_changed();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS api_tenant_changed ON tenancy_tenant;
DROP FUNCTION IF EXISTS claw_api_key_tenant_changed();
DROP TRIGGER IF EXISTS api_apikey_changed ON api_apikey;
DROP FUNCTION IF EXISTS claw_api_key_changed();
"""


class Migration(migrations.Migration):
    dependencies = [("api", "0002_unlogged_cache"), ("tenancy", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
