"""Process liveness, for /readyz and `claw doctor`."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """One row per worker process; ``seen_at`` is refreshed every few seconds."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.name
