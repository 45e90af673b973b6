"""Erasing what the product keeps about one person in one tenant (issue 25,
Decisions): their personal memories, their own copies of the agents' context files
(USER.md, MEMORY.md ..., G3) and, when asked, their workspace folder of open agents
(``tools_app.workspace``). Offered when a member is removed from a tenant; the chat's
"forget everything about me" erases the first two for oneself.

Nothing of another tenant is touched: the same person may still be a member there.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from agents.models import AgentFile, MemoryEntry, MemoryScope
from claw_platform.audit.actions import record_audit_event
from tools_app.workspace import OPEN, workspace_path

logger = logging.getLogger("claw.memory")

MAX_COUNTED_FILES = 100_000


@dataclass(frozen=True)
class PersonalData:
    memories: int
    files: int
    workspace_files: int
    workspace: Path


def user_workspace(tenant_id: int, user_id: int) -> Path:
    return workspace_path(tenant_id=tenant_id, agent_id=0, agent_type=OPEN, user_id=user_id)


def _count_files(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    count = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            count += 1
            if count >= MAX_COUNTED_FILES:
                break
    return count


def personal_data(tenant_id: int, user_id: int) -> PersonalData:
    """What would be erased: counts, for the confirmation page."""
    folder = user_workspace(tenant_id, user_id)
    return PersonalData(
        memories=MemoryEntry._base_manager.filter(
            tenant_id=tenant_id, scope=MemoryScope.USER, user_id=user_id
        ).count(),
        files=AgentFile._base_manager.filter(tenant_id=tenant_id, user_id=user_id).count(),
        workspace_files=_count_files(folder),
        workspace=folder,
    )


@transaction.atomic
def do_erase_personal_data(
    tenant_id: int,
    user_id: int,
    *,
    workspace: bool = False,
    actor: Any = None,
    ip: str | None = None,
    reason: str = "",
) -> dict[str, int]:
    """Erase ``user_id``'s memories and context-file copies in ``tenant_id`` (and their
    workspace folder once the transaction commits, if ``workspace``); one audit event
    with the counts."""
    memories, _ = MemoryEntry._base_manager.filter(
        tenant_id=tenant_id, scope=MemoryScope.USER, user_id=user_id
    ).delete()
    files, _ = AgentFile._base_manager.filter(tenant_id=tenant_id, user_id=user_id).delete()
    counts = {"memories": memories, "files": files}
    if workspace:
        folder = user_workspace(tenant_id, user_id)
        counts["workspace_files"] = _count_files(folder)

        def remove() -> None:
            try:
                shutil.rmtree(folder)
            except FileNotFoundError:
                pass
            except OSError:
                logger.exception("could not remove the workspace %s", folder)

        transaction.on_commit(remove)
    record_audit_event(
        action="member.personal_data_erased",
        actor=actor,
        tenant_id=tenant_id,
        object_type="auth.user",
        object_id=str(user_id),
        diff={
            **{name: [count, 0] for name, count in counts.items()},
            **({"reason": [None, reason]} if reason else {}),
        },
        ip=ip,
    )
    return counts
