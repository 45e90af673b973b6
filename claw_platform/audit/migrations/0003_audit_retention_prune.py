"""Retention (Z3) through one defined path: the trigger still refuses every UPDATE,
and refuses every DELETE except of a row older than its tenant's retention
(``tenancy_tenant.audit_retention_days``; 365 days for rows of no tenant), measured
against the database's own clock. ``audit_prune_expired()`` deletes exactly those
rows and returns how many; nothing else can remove an audit row."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION audit_event_expired(row_tenant bigint, row_created timestamptz) RETURNS boolean AS $$
    SELECT row_created < now() - make_interval(days => coalesce(
        (SELECT greatest(t.audit_retention_days, 1) FROM tenancy_tenant t WHERE t.id = row_tenant), 365))
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND audit_event_expired(OLD.tenant_id, OLD.created_at) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit events are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION audit_prune_expired() RETURNS bigint AS $$
DECLARE
    removed bigint;
BEGIN
    DELETE FROM audit_auditevent a WHERE audit_event_expired(a.tenant_id, a.created_at);
    GET DIAGNOSTICS removed = ROW_COUNT;
    RETURN removed;
END;
$$ LANGUAGE plpgsql;
"""

BACKWARD = """
DROP FUNCTION IF EXISTS audit_prune_expired();
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
DROP FUNCTION IF EXISTS audit_event_expired(bigint, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0002_append_only_trigger"),
        ("tenancy", "0002_tenant_audit_retention"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
