"""The conversation store (S1, S2, S3, S7): Session -> Thread -> Turn, and Messages.

A message's ``parts`` is the engine's JSON form (``agents.engine.types``). History is
append-only: compaction marks messages ``compacted`` and undo marks them ``undone``;
nothing a user said is ever deleted by the engine.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from claw_platform.tenancy.models import TenantOwned


class Session(TenantOwned):
    MEMBER_OWNER = "user"  # whose session: the member rule (tenancy.member_rule)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        help_text="The parent session of a sub-agent's session.",
    )
    depth = models.PositiveSmallIntegerField(default=0)
    is_group = models.BooleanField(
        default=False,
        db_default=False,
        help_text="A group chat: the agent answers only messages that mention it (its name or @slug), "
        "and its MEMORY.md and personal memories stay out of it (E16).",
    )
    handed_off_from = models.ForeignKey(
        "agents.Agent",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The agent that handed this chat over to the current one (G5); it may be handed back.",
    )
    title = models.CharField(max_length=200, blank=True)
    # channel:sender:thread for sessions opened from outside (S5).
    external_key = models.CharField(max_length=300, null=True, blank=True)  # noqa: DJ001  (NULL: no key; unique when set)
    channel = models.CharField(max_length=32, default="web")
    model_override = models.ForeignKey(
        "agents.ModelProfile",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="Chosen with /model for this session.",
    )
    active_thread = models.ForeignKey(
        "agents.Thread", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=Decimal(0))
    created_at = models.DateTimeField(auto_now_add=True)
    last_activity_at = models.DateTimeField(auto_now_add=True, db_index=True)
    archived_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set when an idle outside conversation is pruned: its key then opens a new session.",
    )
    deleted_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set when its member deletes the chat: hidden at once, removed for good "
        "once the undo window (CLAW_CHAT_UNDO_DELETE_SECONDS) has passed.",
    )
    memory_reflected_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the memory reflector last read this chat (C9, agents.memory.reflector).",
    )

    class Meta:
        ordering = ["-last_activity_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "agent", "external_key"],
                name="session_unique_live_external_key",
                condition=Q(external_key__isnull=False, archived_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return self.title or f"Session {str(self.pk)[:8]}"


class ThreadState(models.TextChoices):
    IDLE = "idle", "Idle"
    PROCESSING = "processing", "Processing"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    COMPLETED = "completed", "Completed"
    INTERRUPTED = "interrupted", "Interrupted"


class Thread(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="threads")
    state = models.CharField(max_length=24, choices=ThreadState.choices, default=ThreadState.IDLE)
    summary = models.TextField(blank=True, help_text="Compaction summary injected at the head of requests.")
    compaction_count = models.PositiveIntegerField(default=0)
    # The highest message seq handed out; bumped in the transaction that appends.
    last_seq = models.PositiveIntegerField(default=0)
    # Turns started on this thread; a turn's number is also its checkpoint's.
    turn_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"Thread {str(self.pk)[:8]} ({self.state})"


class TurnState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETE = "complete", "Complete"
    FAILED = "failed", "Failed"
    # Taken back by Regenerate, Edit or Retry in the chat (its messages undone): not shown.
    REWOUND = "rewound", "Taken back"


class Turn(TenantOwned):
    """One user request and everything the agent did for it.

    While a turn runs it also holds the run's durable scratch state: the pending step
    (an assistant message whose tool calls have not all finished), the partial text
    of a streaming reply, and the tool-call marks (``ToolCallMark``).
    """

    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="turns")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TurnState.choices, default=TurnState.PENDING)
    user_text = models.TextField(blank=True)
    response_text = models.TextField(blank=True)
    error = models.TextField(blank=True)
    pending_step = models.JSONField(null=True, blank=True)
    partial_text = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread_id", "number"]
        constraints = [models.UniqueConstraint(fields=["thread", "number"], name="turn_unique_number")]

    def __str__(self) -> str:
        return f"Turn {self.number} ({self.state})"


class MessageState(models.TextChoices):
    ACTIVE = "active", "Active"
    COMPACTED = "compacted", "Compacted (covered by the summary)"
    UNDONE = "undone", "Undone"
    CLEARED = "cleared", "Cleared from the context (/clear), kept in history"


class Message(TenantOwned):
    MEMBER_OWNER = "session__user"  # whose session: the member rule (tenancy.member_rule)

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="messages")
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages")
    # Monotonic per thread; assigned under the thread's row lock (S7).
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16)
    parts = models.JSONField()
    state = models.CharField(max_length=16, choices=MessageState.choices, default=MessageState.ACTIVE)
    undo_checkpoint = models.ForeignKey(
        "agents.Checkpoint", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["thread", "seq"], name="message_unique_seq")]
        indexes = [
            # The history tail: active messages of a thread, newest first.
            models.Index(fields=["thread", "-seq"], name="message_active_tail", condition=Q(state="active"))
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.seq}"


class Checkpoint(TenantOwned):
    """Undo/redo (S3): the history boundary before a turn. 20 kept per thread."""

    MEMBER_OWNER = "thread__session__user"  # whose session: the member rule (tenancy.member_rule)

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="checkpoints")
    number = models.PositiveIntegerField()
    message_seq = models.PositiveIntegerField(help_text="Messages up to this seq belong before the turn.")
    undone = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread_id", "number"]
        constraints = [models.UniqueConstraint(fields=["thread", "number"], name="checkpoint_unique_number")]

    def __str__(self) -> str:
        return f"Checkpoint {self.number}"


class ToolCallMark(TenantOwned):
    """A tool call started (and maybe finished) within a turn, so a resumed run can
    tell a call that finished from one that was interrupted mid-way (R1)."""

    MEMBER_OWNER = "turn__session__user"  # whose session: the member rule (tenancy.member_rule)

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_marks")
    call_id = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    side_effects = models.BooleanField(default=True)
    result = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["turn", "call_id"], name="toolcallmark_unique_call")]

    def __str__(self) -> str:
        return f"{self.name} {self.call_id}"
