"""The chat socket: ``/ws/sessions/<uuid>/`` (U1, U2, E5, Z4).

The consumer is thin: it checks access before accepting, joins the session's group
(where ``channels_app.relay`` publishes run events) and turns client frames into
actions. Protocol (JSON frames):

client -> server
  {"type": "message", "text": "...", "attachments": [3, 4]}
                                            a user message (a run), or a slash command;
                                            with the ids of files uploaded to
                                            /chat/s/<id>/attachments/ (E23)
  {"type": "stop"}                          cancel the session's active run
  {"type": "rewind", "mode": "regenerate" | "retry" | "edit", "text": "..."}
                                            take back the last turn and send it again
                                            (edit: with ``text``), as a new run
  {"type": "approve" | "deny", "approval_id": 7, "reason": "...", "always": false}
                                            (or "run" + "call_id" instead of approval_id)
  {"type": "resume", "run": 12, "after": 5} stored events after seq 5 of run 12 and all
                                            of the session's later runs; without "run":
                                            every event of the unfinished runs

server -> client
  {"type": <event>, "run": 12, "seq": 6, "payload": {...}}   run.started, chunk, ...
  {"type": "snapshot", "run": 12, "seq": 6, "payload": {"text": "...", "status": "running",
                                                         "turn": {...}}}
                                            the state of an unfinished run's turn (resume):
                                            stored messages, the step in flight, the
                                            partial reply ("text"), approval requests
                                            (channels_app.transcript)
  {"type": "command", "payload": {"command": "help", "text": "...", "status": "completed"}}
  {"type": "error", "payload": {"message": "..."}}
  {"type": "resync"}                        relayed frames were lost on the way (the Redis
                                            layer reconnected, or this socket fell too far
                                            behind): send "resume" as after a reconnect

Close codes before accept: 4401 not signed in, 4404 no such session (missing, another
tenant's, not a member, or another member's chat -- indistinguishable on purpose).
After accept the socket closes when a change takes its access away (a key revoked or
expired, its tenant disabled, a membership removed, an account deactivated: 4401 or
4404) or changes it (another role: 4403, reconnect for the new rights); see
``claw_platform.api.credential_watch``.

API clients (A6) connect without a login session and send an API key first:
  {"type": "auth", "key": "claw_..."}        -> {"type": "authenticated", "payload": {"can_act": true}}
A missing, wrong or foreign key (or any other first frame, or none within
AUTH_FRAME_SECONDS) closes the socket with 4401, or 4404 for a session the key's
tenant does not have. A write-scope key may act; a read-scope key only reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from agents.actions.attachments import AttachmentRefused, do_attach_to_turn, files_note, unsent_attachments
from agents.actions.message_batch import MessageRequest
from agents.actions.rewind import REWIND_MODES, RewindRefused, do_rewind_last_turn
from agents.actions.runs import active_run, do_cancel_run, do_decide_approval, do_send_message
from agents.engine.commands import parse_slash_command
from agents.models import ApprovalRequest, Attachment, Run, RunStatus, Session, Turn
from agents.runtime.chat import handle_message
from agents.runtime.events import events_after
from channels_app.access import (
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
    SessionNotFound,
    access_session,
    login_access_lost,
)
from channels_app.live_consumer import LiveJsonConsumer
from channels_app.relay import event_frame, session_group
from channels_app.transcript import UNFINISHED, turn_state
from channels_app.write_slots import send_message, write_slot
from claw_platform.api.credential_watch import credential_watch, login_credentials
from claw_platform.db import db_async
from claw_platform.tenancy.context import tenant_context

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 100_000
MAX_REPLAY_RUNS = 50
AUTH_FRAME_SECONDS = 10.0


class ClientError(Exception):
    """A refusal the client is told about in an ``error`` frame."""


class SessionConsumer(LiveJsonConsumer):
    session: Session
    can_act: bool
    group: str

    awaiting_key = False
    access_lost = False
    api_key_id: int | None = None  # signed in with an API key: its runs and budget are the key's
    _access_watch: Any = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            if _has_origin(self.scope):
                await self.close(code=CLOSE_UNAUTHENTICATED)
                return
            # An API client: it authenticates with its first frame (A6).
            self.awaiting_key = True
            await self.accept()
            self._auth_timer = asyncio.get_running_loop().call_later(
                AUTH_FRAME_SECONDS, lambda: asyncio.ensure_future(self._close_unauthenticated())
            )
            return
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        since = credential_watch.generation()
        try:
            access = await db_async(access_session)(user, session_id)
        except SessionNotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.session = access.session
        self.can_act = access.can_act
        self._watch_access(
            login_credentials(access.session.tenant_id, user.pk),
            partial(login_access_lost, user.pk, session_id, access),
            since,
        )
        self.group = session_group(self.session.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        timer = getattr(self, "_auth_timer", None)
        if timer is not None:
            timer.cancel()
        credential_watch.unwatch(self._access_watch)
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    # ------------------------------------------------------------ client frames

    async def _close_unauthenticated(self) -> None:
        if self.awaiting_key:
            await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _authenticate_key(self, content: Any) -> None:
        from claw_platform.api.sockets import key_access_lost, key_session_access

        self.awaiting_key = False
        self._auth_timer.cancel()
        key = content.get("key") if isinstance(content, dict) and content.get("type") == "auth" else None
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        since = credential_watch.generation()
        access = await db_async(key_session_access)(key, session_id)
        if access is None or isinstance(access, int):
            await self.close(code=access if isinstance(access, int) else CLOSE_UNAUTHENTICATED)
            return
        self.session, self.can_act, self.scope["user"] = access.session, access.can_act, access.actor
        self.api_key_id = access.api_key_id
        self._watch_access(
            access.credentials,
            partial(key_access_lost, str(key), session_id, access),
            since,
            expires_at=access.expires_at,
        )
        self.group = session_group(self.session.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_json({"type": "authenticated", "payload": {"can_act": self.can_act}})

    def _watch_access(
        self,
        credentials: frozenset[str],
        lost: Callable[[], int | None],
        since: int,
        *,
        expires_at: datetime | None = None,
    ) -> None:
        """Close the socket when a change to its credentials (or a key's expiry)
        takes its access away."""

        async def check() -> None:
            code = await db_async(lost)()
            if code is not None and not self.access_lost:
                self.access_lost = True
                credential_watch.unwatch(self._access_watch)
                await self.close(code=code)

        self._access_watch = credential_watch.watch(credentials, check, since=since, expires_at=expires_at)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.access_lost:
            return  # closed for a change of its rights: no frame of it counts any more
        if self.awaiting_key:
            await self._authenticate_key(content)
            return
        kind = content.get("type") if isinstance(content, dict) else None
        handler = {
            "message": self._on_message,
            "stop": self._on_stop,
            "rewind": self._on_rewind,
            "approve": self._on_decision,
            "deny": self._on_decision,
            "resume": self._on_resume,
        }.get(kind or "")
        if handler is None:
            await self._error(f"Unknown frame type {kind!r}.")
            return
        try:
            with tenant_context(self.session.tenant_id):  # every frame acts in its session's tenant
                await handler(content)
        except ClientError as exc:
            await self._error(str(exc))
        except PermissionDenied:
            await self._error("You cannot do that in this session.")
        except (ValueError, ValidationError) as exc:
            await self._error(_readable(exc))
        except (Run.DoesNotExist, ApprovalRequest.DoesNotExist):
            await self._error("No such run or approval request in this session.")
        except Exception:
            logger.exception("socket frame %r failed in session %s", kind, self.session.pk)
            await self._error("Something went wrong on the server; please try again.")

    async def receive_unreadable(self, reason: str) -> None:
        if self.awaiting_key:
            await self._authenticate_key(None)  # not an auth frame: closes with 4401
            return
        await self._error(reason)

    def _require_actor(self) -> None:
        if not self.can_act:
            raise ClientError("Viewers can read this session but not send, stop or approve.")

    async def _on_message(self, content: dict[str, Any]) -> None:
        self._require_actor()
        text = content.get("text")
        attachments = content.get("attachments") or []
        if not isinstance(attachments, list):
            raise ClientError("attachments must be a list of ids.")
        if attachments and isinstance(text, str) and not text.strip():
            text = "(see the attachments)"
        if not isinstance(text, str) or not text.strip():
            raise ClientError("A message needs some text.")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ClientError(f"That message is too long (over {MAX_MESSAGE_CHARS:,} characters).")
        command = parse_slash_command(text)
        if attachments:
            if command is not None:
                raise ClientError("A command cannot carry attachments.")
            async with write_slot():
                await db_async(self._send_with_attachments)(text, attachments, self.scope["user"], False)
            return
        if command is not None and command.name != "stop":
            # Commands are answered at once, without a run or an LLM call (S4).
            reply = await handle_message(self.session.pk, text)
            await self.send_json(
                {
                    "type": "command",
                    "payload": {"command": reply.command, "text": reply.text, "status": reply.status},
                }
            )
            return
        if command is None:
            await db_async(self._refuse_over_budget)()
        # Its events (run.queued, run.cancelled, approval.decided) reach every tab of
        # the session through the relay once stored.
        run = await send_message(
            MessageRequest(self.session, text, self.scope["user"], api_key_id=self.api_key_id)
        )
        if run is None and command is not None:
            await self._error("Nothing is running.")

    async def _on_rewind(self, content: dict[str, Any]) -> None:
        """Regenerate, Retry (the last question again) or Edit (new text for it)."""
        self._require_actor()
        mode = content.get("mode")
        if mode not in REWIND_MODES:
            raise ClientError(f"mode must be one of {', '.join(REWIND_MODES)}.")
        text = content.get("text")
        if mode == "edit":
            if not isinstance(text, str) or not text.strip():
                raise ClientError("An edited message needs some text.")
            if len(text) > MAX_MESSAGE_CHARS:
                raise ClientError(f"That message is too long (over {MAX_MESSAGE_CHARS:,} characters).")
            if parse_slash_command(text) is not None:
                raise ClientError("An edited message cannot be a command.")
        async with write_slot():
            try:
                last, attached = await db_async(self._rewind)()
            except RewindRefused as exc:
                raise ClientError(str(exc)) from None
        # Every tab of this socket redraws the history without the taken-back turn.
        await self.send_json(
            {"type": "command", "payload": {"command": "rewind", "text": "", "status": "completed"}}
        )
        again = text if mode == "edit" and isinstance(text, str) else last.user_text
        if attached:
            # The taken-back question's attachments go with it again (E23).
            async with write_slot():
                await db_async(self._send_with_attachments)(again, attached, self.scope["user"], True)
            return
        await send_message(
            MessageRequest(self.session, again, self.scope["user"], api_key_id=self.api_key_id)
        )

    def _rewind(self) -> tuple[Turn, list[int]]:
        with tenant_context(self.session.tenant_id):
            session = Session._base_manager.get(pk=self.session.pk)
            last = do_rewind_last_turn(session)
            return last, list(Attachment._base_manager.filter(turn_id=last.pk).values_list("pk", flat=True))

    def _refuse_over_budget(self) -> None:
        """As the API's 402 up front (agents.budgets): a spent budget, a used-up call
        rate or a kill switch is told at once, readably, and nothing is queued."""
        from agents.budgets.errors import BudgetRefused
        from agents.budgets.guard import check_budget_open
        from agents.budgets.http import session_charge

        with tenant_context(self.session.tenant_id):
            try:
                check_budget_open(session_charge(self.session, api_key_id=self.api_key_id))
            except BudgetRefused as refused:
                raise ClientError(refused.message) from None

    def _send_with_attachments(self, text: str, ids: list[Any], user: Any, again: bool) -> None:
        """A message and its attachments in one transaction: the worker that takes the
        run finds them (``again``: a rewound turn's, already checked)."""
        with tenant_context(self.session.tenant_id), transaction.atomic():
            if again:
                found = list(Attachment._base_manager.filter(pk__in=ids, session_id=self.session.pk))
            else:
                try:
                    found = unsent_attachments(self.session, user, ids)
                except AttachmentRefused as exc:
                    raise ClientError(str(exc)) from None
            if not again:
                text = text + files_note(found)
            run = do_send_message(self.session, text, acting_user=user, api_key_id=self.api_key_id)
            if run is None or run.status != RunStatus.QUEUED or run.turn is None:
                raise ClientError("Attachments go with a new question, not with an approval reply.")
            do_attach_to_turn(run.turn, [a.pk for a in found])

    async def _on_stop(self, content: dict[str, Any]) -> None:
        self._require_actor()
        async with write_slot():
            stopped = await db_async(self._stop)(self.scope["user"])
        if stopped is None:
            raise ClientError("Nothing is running.")

    def _stop(self, user: Any) -> Run | None:
        with tenant_context(self.session.tenant_id):
            run = active_run(self.session)
            if run is None:
                return None
            return do_cancel_run(run, acting_user=user)

    async def _on_decision(self, content: dict[str, Any]) -> None:
        self._require_actor()
        reason = content.get("reason") or ""
        if not isinstance(reason, str):
            raise ClientError("The reason must be text.")
        always = bool(content.get("always")) and content["type"] == "approve"
        async with write_slot():
            await db_async(self._decide)(
                content, content["type"] == "approve", reason, always, self.scope["user"]
            )

    def _decide(self, content: dict[str, Any], approved: bool, reason: str, always: bool, user: Any) -> None:
        with tenant_context(self.session.tenant_id):
            approvals = ApprovalRequest.objects.filter(run__session_id=self.session.pk)
            if content.get("approval_id") is not None:
                approvals = approvals.filter(pk=_int(content["approval_id"]))
            elif content.get("run") is not None and content.get("call_id"):
                approvals = approvals.filter(run_id=_int(content["run"]), call_id=str(content["call_id"]))
            else:
                raise ClientError("Say which request: approval_id, or run and call_id.")
            approval = approvals.first()
            if approval is None:
                raise ClientError("No such approval request in this session.")
            do_decide_approval(approval, approved, acting_user=user, reason=reason, always=always)

    async def _on_resume(self, content: dict[str, Any]) -> None:
        after = _int(content.get("after") or 0)
        run_id = content.get("run")
        frames = await db_async(self._replay)(_int(run_id) if run_id is not None else None, after)
        for frame in frames:
            await self.send_json(frame)

    def _replay(self, run_id: int | None, after: int) -> list[dict[str, Any]]:
        """Stored events the client has not seen, and the partial reply of a running
        run, read from the database: no LLM call is repeated (U2, Z4)."""
        with tenant_context(self.session.tenant_id):
            runs = Run.objects.filter(session_id=self.session.pk)
            runs = runs.filter(pk__gte=run_id) if run_id is not None else runs.filter(status__in=UNFINISHED)
            frames: list[dict[str, Any]] = []
            for run in runs.order_by("pk")[:MAX_REPLAY_RUNS]:
                since = after if run.pk == run_id else 0
                frames.extend(event_frame(run.pk, e.seq, e.type, e.payload) for e in events_after(run, since))
                if run.status in UNFINISHED:
                    state = turn_state(Turn.objects.get(pk=run.turn_id))
                    frames.append(
                        event_frame(
                            run.pk,
                            run.event_seq,
                            "snapshot",
                            {"text": state["partial"], "status": run.status, "turn": state},
                        )
                    )
            return frames

    # ------------------------------------------------------------ server side

    async def run_event(self, message: dict[str, Any]) -> None:
        """A run event relayed to the session's group (``channels_app.relay``): a text
        delta arrives as the frame's JSON text, other events as the frame."""
        text = message.get("text")
        if text is not None:
            await self.send_text(text)
        else:
            await self.send_json(message["event"])

    async def layer_gap(self, message: dict[str, Any]) -> None:
        """The channel layer lost messages to this socket (``claw_platform.redis_layer``):
        the client reads what it missed from the stored events."""
        await self.send_json({"type": "resync"})

    async def _error(self, message: str) -> None:
        await self.send_json({"type": "error", "payload": {"message": message}})


def _has_origin(scope: dict[str, Any]) -> bool:
    return any(name == b"origin" for name, _value in scope.get("headers", []))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ClientError(f"Expected a number, got {value!r}.") from None


def _readable(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc) or exc.__class__.__name__
