"""Recall's text half finds a rare word through the GIN index again under row-level
security (issue 25, the honest bench).

As the runtime role every query on agents_memoryentry carries the policy
``claw_tenant``, and the planner may not use a non-leakproof operator such as ``@@``
as an index condition ahead of it: the GIN index on (tenant, search_vector) is
searched by the tenant alone, and a rare word (a code, a name) costs a pass over all
of the tenant's rows. ``claw_memory_term_hits`` returns the ids of one word's newest
matches (at most ``p_limit``) that the given owner may see, in the same tenant the
policy allows and nowhere else: it answers nothing unless ``p_tenant`` is the tenant
in ``claw.tenant_id`` (or ``claw.rls_bypass`` is on), exactly the policy's test. It
runs as its owner (SECURITY DEFINER, a fixed search_path): where the owner is not
subject to the policy (the embedded server's), the word is an index condition and
the planner chooses by its frequency (the GIN index for a rare word, the newest rows
of the tenant for a common one); where it is, the same policy applies and only the
speed differs. The caller joins the ids back to the table under the policy."""

from django.db import migrations

FUNCTION = r"""
CREATE OR REPLACE FUNCTION claw_memory_term_hits(
    p_tenant bigint, p_agent bigint, p_user bigint, p_scopes text[], p_term tsquery, p_limit integer
) RETURNS TABLE (id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
BEGIN
    IF p_tenant IS DISTINCT FROM nullif(current_setting('claw.tenant_id', true), '')::bigint
       AND coalesce(current_setting('claw.rls_bypass', true), '') <> 'on' THEN
        RETURN;
    END IF;
    -- EXECUTE: planned for these values (the word's frequency), never a generic plan.
    RETURN QUERY EXECUTE 'SELECT m.id FROM public.agents_memoryentry m '
        'WHERE m.tenant_id = $1 AND m.search_vector @@ $5 AND m.category <> ''archived'' '
        'AND (m.scope = ''tenant'' OR (m.scope = ''agent'' AND m.agent_id = $2) '
        'OR (m.scope = ''user'' AND m.user_id = $3)) AND ($4 IS NULL OR m.scope = ANY($4)) '
        'ORDER BY m.id DESC LIMIT $6'
        USING p_tenant, p_agent, p_user, p_scopes, p_term, p_limit;
END
$fn$
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0019_memory_tenant_terms"),
    ]

    operations = [
        migrations.RunSQL(
            FUNCTION,
            "DROP FUNCTION IF EXISTS claw_memory_term_hits(bigint, bigint, bigint, text[], tsquery, integer)",
        ),
    ]
