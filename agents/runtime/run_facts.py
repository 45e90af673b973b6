"""What a run's set-up reads besides its session and turn, read with them.

A run's set-up asked the database, one statement and one trip to the database
threads each: the agent's config version (``resolve_agent``'s cache check), the role
of the user the run acts for, the tenant's extensions version (the extensions
cache's check) and the session's standing approvals (T12). The worker now reads
them as subqueries of the statement that loads the session and turn
(``agents.runtime.worker._load``) and keeps them on the session it hands to the run;
the set-up then asks the database only when a cache is out of date. What the
values mean is unchanged: each is read once per run, at its start, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claw_platform.tenancy.models import Role

_ATTRIBUTE = "_claw_run_facts"


@dataclass(frozen=True, slots=True)
class RunFacts:
    agent_version: int | None  # None: the agent is gone
    membership_role: str | None  # None: the session's user is no member
    extensions_version: int
    grants: tuple[tuple[str, str], ...]  # (tool name, arguments digest)


def facts_columns() -> str:
    """The select list of :class:`RunFacts` for a statement that has the session as
    ``s`` (in the order :func:`facts_from` reads them)."""
    from agents.models import Agent
    from claw_platform.tenancy.models import Membership
    from tools_app.models import ExtensionsVersion, ToolApprovalGrant

    return (
        f"(SELECT a.config_version FROM {Agent._meta.db_table} a WHERE a.id = s.agent_id), "  # noqa: S608 (tables of the models)
        f"(SELECT m.role FROM {Membership._meta.db_table} m "
        "WHERE m.tenant_id = s.tenant_id AND m.user_id = s.user_id), "
        f"(SELECT v.version FROM {ExtensionsVersion._meta.db_table} v WHERE v.tenant_id = s.tenant_id), "
        f"ARRAY(SELECT ARRAY[g.tool_name, g.arguments_digest] FROM {ToolApprovalGrant._meta.db_table} g "
        "WHERE g.session_id = s.id)"
    )


FACTS_COLUMNS = 4


def facts_from(values: tuple[Any, ...]) -> RunFacts:
    agent_version, role, extensions_version, grants = values
    return RunFacts(
        agent_version=agent_version,
        membership_role=role,
        extensions_version=int(extensions_version or 0),
        grants=tuple((str(name), str(digest)) for name, digest in grants or ()),
    )


def remember_facts(session: Any, facts: RunFacts) -> None:
    setattr(session, _ATTRIBUTE, facts)


def facts_of(session: Any) -> RunFacts | None:
    """The facts read with ``session`` for its run, or None (read them as needed)."""
    return getattr(session, _ATTRIBUTE, None)


def acting_role(user_id: Any, membership_role: str | None) -> str:
    """The role a run acts with: the member's role; a run for no user (API key,
    routine) acts as a member; a user with no membership gets viewer rights."""
    if user_id is None:
        return Role.MEMBER
    return membership_role or Role.VIEWER
