"""The current tenant, held in one place.

A ContextVar set by the request middleware, the WebSocket consumers and the task
entry points alike. ``TenantManager`` reads it and refuses to query without one.
``all_tenants()`` is the explicit, visible escape for superusers and system code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claw_platform.tenancy.models import Tenant


@dataclass(frozen=True)
class _Scope:
    tenant_id: int | None
    all_tenants: bool = False


_scope: ContextVar[_Scope | None] = ContextVar("claw_tenant_scope", default=None)


class TenantContextMissing(RuntimeError):
    """A tenant-owned model was queried with no tenant in context."""


def current_tenant_id() -> int | None:
    scope = _scope.get()
    return scope.tenant_id if scope else None


def is_all_tenants() -> bool:
    scope = _scope.get()
    return bool(scope and scope.all_tenants)


def has_scope() -> bool:
    return _scope.get() is not None


@contextmanager
def tenant_context(tenant: Tenant | int) -> Iterator[None]:
    """Run the block as ``tenant``: every tenant-owned query is filtered to it."""
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    token = _scope.set(_Scope(tenant_id=tenant_id))
    try:
        yield
    finally:
        _scope.reset(token)


@contextmanager
def all_tenants() -> Iterator[None]:
    """Run the block unscoped (superuser admin, maintenance tasks). Use sparingly: its
    statements also bypass row-level security (``claw.rls_bypass = 'on'``); system code
    says so with ``claw_platform.tenancy.rls.system_bypass()``, the same scope."""
    token = _scope.set(_Scope(tenant_id=None, all_tenants=True))
    try:
        yield
    finally:
        _scope.reset(token)


@contextmanager
def no_tenant() -> Iterator[None]:
    """Run the block with no tenant in context: tenant-scoped managers refuse, and under
    strict row-level security its statements see and write no tenant's rows. Entry
    points start their work from it (nothing inherited from the caller)."""
    token = _scope.set(None)
    try:
        yield
    finally:
        _scope.reset(token)


def keep_scope_while_streaming(response: Any) -> Any:
    """A streamed body (an export, an event stream, a ``wait``-mode reply) is produced
    after the view returned and the request's scope was reset: run each step of it in
    the scope in context now, so its queries see the tenant's rows (strict row-level
    security passes none without one) and nothing else. Other responses, and any
    response of a request with no scope, pass as they are."""
    scope = _scope.get()
    if scope is None or not getattr(response, "streaming", False):
        return response  # no scope to keep (an anonymous file or page): left as it is
    content = response.streaming_content
    if getattr(response, "is_async", False):

        async def stepped_async() -> AsyncIterator[Any]:
            iterator = content.__aiter__()
            while True:
                token = _scope.set(scope)
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                finally:
                    _scope.reset(token)
                yield item

        response.streaming_content = stepped_async()
    else:

        def stepped() -> Iterator[Any]:
            iterator = iter(content)
            while True:
                token = _scope.set(scope)
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                finally:
                    _scope.reset(token)
                yield item

        response.streaming_content = stepped()
    return response


def set_scope(tenant_id: int | None, *, all_tenants: bool = False) -> object:
    """Low-level: set the scope and return a token for ``reset_scope`` (middleware)."""
    if tenant_id is None and not all_tenants:
        return _scope.set(None)
    return _scope.set(_Scope(tenant_id=tenant_id, all_tenants=all_tenants))


def reset_scope(token: object) -> None:
    _scope.reset(token)  # type: ignore[arg-type]
