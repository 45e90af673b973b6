"""Workspaces (T2): a directory per tenant and user for open agents, per tenant and
agent for predefined ones, under ``CLAW_VAR_DIR/workspaces``. Created on first use,
readable only by the product's user."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

OPEN = "open"


def workspace_root() -> Path:
    return Path(settings.VAR_DIR) / "workspaces"


def workspace_path(*, tenant_id: int, agent_id: int, agent_type: str, user_id: int | None) -> Path:
    """The workspace of a run: ``t<tenant>/u<user>`` (open agents; ``u0`` for runs
    without a user) or ``t<tenant>/a<agent>`` (predefined agents)."""
    owner = f"u{user_id or 0}" if agent_type == OPEN else f"a{agent_id}"
    return workspace_root() / f"t{int(tenant_id)}" / owner


def ensure_workspace(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Resolved once here, so the path guard compares against the real location.
    return path.resolve(strict=True)
