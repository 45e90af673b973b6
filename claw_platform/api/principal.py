"""Who is calling the API: a signed-in member or an API key, always for one tenant.

A key acts as the member who created it, with that member's current role: its scopes
are cut to the role's, and the member rule (:mod:`claw_platform.tenancy.member_rule`)
shows it what the member sees. A key no person made (``claw apikey create``, or a
pairing code the operator's key issued) acts for the whole tenant, within its
scopes. :func:`claw_platform.api.auth.authenticate_key` refuses a key whose creator
left the tenant or was deactivated.

Actions take an ``acting_user``. For a key that is an :class:`ApiKeyActor`: it has no
``pk`` (audit rows name it in ``actor_label``) and carries the key's tenant and its
:class:`Caller`, which the run actions check (the API already checked the scope).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claw_platform.api.models import IMPLIED_SCOPES, ApiKey, Scope, granted_scopes
from claw_platform.tenancy.member_rule import Caller
from claw_platform.tenancy.models import Role

ROLE_SCOPES = {
    Role.OWNER: IMPLIED_SCOPES[Scope.ADMIN],
    Role.ADMIN: IMPLIED_SCOPES[Scope.ADMIN],
    Role.MEMBER: IMPLIED_SCOPES[Scope.WRITE],
    Role.VIEWER: IMPLIED_SCOPES[Scope.READ],
}


@dataclass(frozen=True)
class ApiKeyActor:
    api_key_id: int
    api_key_tenant_id: int
    label: str
    caller: Caller
    pk: None = None
    is_superuser: bool = False
    is_authenticated: bool = True

    def __str__(self) -> str:
        return self.label

    def get_username(self) -> str:
        return self.label


def role_scopes(role: str | None) -> frozenset[str]:
    return ROLE_SCOPES.get(Role(role), frozenset()) if role in Role.values else frozenset()


@dataclass(frozen=True)
class Principal:
    tenant_id: int
    scopes: frozenset[str]
    caller: Caller
    user: Any = None
    api_key: ApiKey | None = None

    @property
    def acting_user(self) -> Any:
        if self.api_key is not None:
            return ApiKeyActor(
                self.api_key.pk, self.api_key.tenant_id, f"api key {self.api_key}", self.caller
            )
        return self.user

    @property
    def session_user(self) -> Any:
        """The user a new session belongs to: the member, or the key's creator."""
        if self.api_key is not None:
            return self.api_key.created_by
        return self.user

    def allows(self, scope: str) -> bool:
        return scope in self.scopes

    def outside_session_key(self, key: str) -> str:
        """The stored key of a session a caller names from outside (``hook:<key>``,
        ``openai:<agent>:<key>``): a member's names are their own (two members using
        the same name reach two sessions); callers who see the tenant's sessions
        share the tenant's names."""
        return key if self.caller.sees_every_session else f"member{self.caller.user_id}:{key}"

    @classmethod
    def for_key(cls, api_key: ApiKey) -> Principal:
        """The principal of an authenticated key (``authenticate_key`` put its
        creator's current role on it as ``creator_role``)."""
        scopes = granted_scopes(list(api_key.scopes))
        if api_key.created_by_id is None:
            return cls(
                tenant_id=api_key.tenant_id, scopes=scopes, caller=Caller(api_key.tenant_id), api_key=api_key
            )
        role = api_key.creator_role  # type: ignore[attr-defined]
        caller = Caller(api_key.tenant_id, api_key.created_by_id, role)
        return cls(
            tenant_id=api_key.tenant_id, scopes=scopes & role_scopes(role), caller=caller, api_key=api_key
        )

    @classmethod
    def for_member(cls, user: Any, tenant_id: int, role: str) -> Principal:
        return cls(
            tenant_id=tenant_id, scopes=role_scopes(role), caller=Caller(tenant_id, user.pk, role), user=user
        )
