"""A key acts as the member who created it (issue 21), so what a key may do changes
when its creator's membership or account changes:

- ``claw_api_keys`` is also NOTIFYed when a membership is changed or removed
  (``m:<tenant>:<user>``; a key whose creator is no member is never kept, so a new
  membership needs no notice), when an account is (de)activated or deleted (``u:<user>``),
  and per tenant when a tenant changes (``t:<tenant>``, was ``*`` per statement).
  Web processes forget the keys they keep and re-check the sockets and event streams
  those credentials opened (claw_platform.api.credential_watch).
- A key (and a pairing code) goes with the person who made it: ``created_by`` is
  NULL only for what the operator made, which acts for the whole tenant.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

FORWARD = """
CREATE FUNCTION claw_membership_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.role = NEW.role AND OLD.tenant_id = NEW.tenant_id
       AND OLD.user_id = NEW.user_id THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('claw_api_keys', 'm:' || OLD.tenant_id || ':' || OLD.user_id);
    IF TG_OP = 'UPDATE' AND (OLD.tenant_id <> NEW.tenant_id OR OLD.user_id <> NEW.user_id) THEN
        PERFORM pg_notify('claw_api_keys', 'm:' || NEW.tenant_id || ':' || NEW.user_id);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER api_membership_changed AFTER UPDATE OR DELETE ON tenancy_membership
    FOR EACH ROW EXECUTE FUNCTION claw_membership_changed();

CREATE FUNCTION claw_account_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A sign-in (last_login), a new password or name changes no key's rights.
    IF TG_OP = 'UPDATE' AND OLD.is_active = NEW.is_active THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('claw_api_keys', 'u:' || OLD.id);
    RETURN NULL;
END $$;
CREATE TRIGGER api_account_changed AFTER UPDATE OR DELETE ON {users}
    FOR EACH ROW EXECUTE FUNCTION claw_account_changed();

DROP TRIGGER api_tenant_changed ON tenancy_tenant;
DROP FUNCTION claw_api_key_tenant_changed();
CREATE FUNCTION claw_api_key_tenant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('claw_api_keys', 't:' || OLD.id);
    RETURN NULL;
END $$;
CREATE TRIGGER api_tenant_changed AFTER UPDATE OR DELETE ON tenancy_tenant
    FOR EACH ROW EXECUTE FUNCTION claw_api_key_tenant_changed();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS api_tenant_changed ON tenancy_tenant;
DROP FUNCTION IF EXISTS claw_api_key_tenant_changed();
CREATE FUNCTION claw_api_key_tenant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('claw_api_keys', '*');
    RETURN NULL;
END $$;
CREATE TRIGGER api_tenant_changed AFTER UPDATE OR DELETE ON tenancy_tenant
    FOR EACH STATEMENT EXECUTE FUNCTION claw_api_key_tenant_changed();
DROP TRIGGER IF EXISTS api_account_changed ON {users};
DROP FUNCTION IF EXISTS claw_account_changed();
DROP TRIGGER IF EXISTS api_membership_changed ON tenancy_membership;
DROP FUNCTION IF EXISTS claw_membership_changed();
"""


def _run(template: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        users = apps.get_model(settings.AUTH_USER_MODEL)._meta.db_table
        schema_editor.execute(template.replace("{users}", schema_editor.quote_name(users)))

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0005_key_and_code_hashes_are_secret_digests"),
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="apikey",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                help_text="The member the key acts as; empty: made by the operator, acts for the tenant.",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="pairingcode",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
    ]
