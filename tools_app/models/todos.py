"""A session's todo list (T7): what todo_write stores and todo_read shows."""

from __future__ import annotations

from django.db import models

from claw_platform.tenancy.models import TenantOwned


class SessionTodoList(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.OneToOneField("agents.Session", on_delete=models.CASCADE, related_name="+")
    items = models.JSONField(default=list)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Todos of {self.session_id}"
