"""Who is calling the API: a signed-in member or an API key, always for one tenant.

Actions take an ``acting_user``. For a key that is an :class:`ApiKeyActor`: it has no
``pk`` (audit rows name it in ``actor_label``) and carries the key's tenant, which the
run actions accept as an actor of that tenant (the API already checked the scope).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from claw_platform.api.models import IMPLIED_SCOPES, ApiKey, Scope, granted_scopes
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
    pk: None = None
    is_superuser: bool = False
    is_authenticated: bool = True

    def __str__(self) -> str:
        return self.label

    def get_username(self) -> str:
        return self.label


@dataclass(frozen=True)
class Principal:
    tenant_id: int
    scopes: frozenset[str]
    user: Any = None
    api_key: ApiKey | None = None

    @property
    def acting_user(self) -> Any:
        if self.api_key is not None:
            return ApiKeyActor(self.api_key.pk, self.api_key.tenant_id, f"api key {self.api_key}")
        return self.user

    @property
    def session_user(self) -> Any:
        """The user a new session belongs to: the member, or the key's creator."""
        if self.api_key is not None:
            return self.api_key.created_by
        return self.user

    def allows(self, scope: str) -> bool:
        return scope in self.scopes

    @classmethod
    def for_key(cls, api_key: ApiKey) -> Principal:
        return cls(tenant_id=api_key.tenant_id, scopes=granted_scopes(list(api_key.scopes)), api_key=api_key)

    @classmethod
    def for_member(cls, user: Any, tenant_id: int, role: str) -> Principal:
        return cls(tenant_id=tenant_id, scopes=ROLE_SCOPES.get(Role(role), frozenset()), user=user)
