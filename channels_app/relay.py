"""The channel-layer relay for run events (U1): every event of a run goes to the group
of the run's session, where each open ``SessionConsumer`` passes it to its browser.

A worker's events arrive in batches from its relay pump (``agents.runtime.relay_pump``:
one batch while the previous one is being sent), and a batch goes to the layer in one
call: with ``claw_platform.channel_layer`` one statement and one commit for the
deltas of every streaming run, not one per token.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from typing import Any

import orjson
from channels.layers import get_channel_layer

from agents.runtime.relay_pump import EPHEMERAL_EVENTS, MAX_MERGED_CHARS
from claw_platform.db import db_async
from claw_platform.storable import storable

logger = logging.getLogger(__name__)

# The consumer method that receives relayed events (``SessionConsumer.run_event``).
RUN_EVENT_MESSAGE = "run.event"
# Relayed payloads stay small: PostgreSQL's NOTIFY carries up to 8,000 bytes, and a
# bigger layer message costs every receiver a database round trip to fetch it. A
# bigger stored event (a long final reply, a large tool preview) is relayed as a
# stub; the client reads it whole from the database with ``resume``.
MAX_RELAYED_PAYLOAD_CHARS = 4_000
_DELTA_KEYS = frozenset({"text", "offset", "stream", "run_id"})


def session_group(session_id: Any) -> str:
    """The channel-layer group of one session's sockets."""
    return f"session_{session_id}"


def tenant_group(tenant_id: Any) -> str:
    """The group of a tenant's event streams (U5): every stored event of its runs."""
    return f"tenant_{tenant_id}"


def event_frame(run_id: Any, seq: int, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The frame a browser receives for one run event: ``{type, run, seq, payload}``."""
    return {"type": event_type, "run": run_id, "seq": seq, "payload": payload}


class ChannelLayerRelay:
    """``RunEventRelay`` (``agents.runtime.events``) over the channel layer: publishes
    each event of a run to ``session_<session id>``.

    The sink gives the run id; the run's session is read once per run and kept (a
    run never changes session). A failure to publish is logged and swallowed: the run
    must not fail because the layer hiccups; stored events (all but chunk/thinking)
    and the partial-text checkpoint let a client catch up with ``resume``.
    """

    MAX_KNOWN_RUNS = 10_000

    def __init__(self, layer_alias: str = "default") -> None:
        self.layer_alias = layer_alias
        self._sessions: OrderedDict[Any, Any] = OrderedDict()

    def remember_run(self, run_id: int, session_id: Any, tenant_id: int) -> None:
        """The run's session and tenant, from a caller that has them at hand (kept as
        the names of their groups: made once per run, not once per token)."""
        self._sessions[run_id] = (
            session_group(session_id),
            tenant_group(tenant_id) if tenant_id is not None else None,
        )
        while len(self._sessions) > self.MAX_KNOWN_RUNS:
            try:  # web processes call this from their database threads as well
                self._sessions.popitem(last=False)
            except KeyError:
                break

    async def close_loop(self) -> None:
        """Release what the layer holds on the running event loop (a worker's run
        loop, before it is closed)."""
        layer = get_channel_layer(self.layer_alias)
        close = getattr(layer, "close_loop", None)
        if close is not None:
            await close()

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        await self.relay_many([(run_id, seq, event_type, payload)])

    async def relay_many(self, events: list[tuple[int, int, str, dict[str, Any]]]) -> None:
        """Publish ``events`` (run id, seq, type, payload) in this order, in one layer
        call when the layer can take many messages at once."""
        layer = get_channel_layer(self.layer_alias)
        if layer is None:
            return
        unknown = {run_id for run_id, *_ in events if run_id not in self._sessions}
        if unknown:
            for run_id, session_id, tenant_id in await db_async(_sessions_of_runs)(sorted(unknown)):
                self.remember_run(run_id, session_id, tenant_id)
        try:
            try:
                await group_send_many(layer, self._layer_messages(events))
            except (UnicodeEncodeError, orjson.JSONEncodeError):
                # A lone surrogate (from a tool's output, say) cannot be encoded: the
                # events go out with it replaced rather than not at all, and the
                # other runs' events of the batch with them.
                await group_send_many(layer, self._layer_messages(events, clean=True))
        except Exception:
            logger.exception(
                "relaying %d events of runs %s failed", len(events), sorted({e[0] for e in events})
            )

    def _layer_messages(
        self, events: list[tuple[int, int, str, dict[str, Any]]], *, clean: bool = False
    ) -> list[tuple[str, dict[str, Any]]]:
        messages: list[tuple[str, dict[str, Any]]] = []
        for run_id, seq, event_type, payload in events:
            groups = self._sessions.get(run_id)
            if groups is None:
                continue  # the run is gone
            messages += _messages(groups, run_id, seq, event_type, storable(payload) if clean else payload)
        return messages


def _messages(
    groups: tuple[str, str | None], run_id: Any, seq: int, event_type: str, payload: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """The layer messages of one event: to the session's group, and a stored event
    also to the tenant's (``groups``). A text delta travels as its frame's JSON text
    (``text``), encoded once here (with orjson: a tenth of the stdlib's time on the
    worker's hottest path) rather than decoded and encoded again for every socket it
    reaches; other events as the frame itself (``event``)."""
    session, tenant = groups
    frame = event_frame(run_id, seq, event_type, slim(payload))
    if event_type in EPHEMERAL_EVENTS:
        return [(session, {"type": RUN_EVENT_MESSAGE, "text": orjson.dumps(frame).decode()})]
    message = {"type": RUN_EVENT_MESSAGE, "event": frame}
    if tenant is None:
        return [(session, message)]
    return [(session, message), (tenant, message)]


def relayed_frame(message: dict[str, Any]) -> dict[str, Any] | None:
    """The frame a ``run.event`` layer message carries (``_messages``), as a dict."""
    text = message.get("text")
    frame = orjson.loads(text) if isinstance(text, str) else message.get("event")
    return frame if isinstance(frame, dict) else None


async def group_send_many(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    """Send (group, message) pairs, each group's in order: in one call when the layer
    has ``group_send_many`` (``claw_platform.channel_layer``), else the groups side by
    side, each group's messages one after another."""
    if not messages:
        return
    many = getattr(layer, "group_send_many", None)
    if many is not None:
        await many(messages)
        return
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, message in messages:
        by_group.setdefault(group, []).append(message)

    async def send_in_order(group: str, batch: list[dict[str, Any]]) -> None:
        for message in batch:
            await layer.group_send(group, message)

    await asyncio.gather(*(send_in_order(group, batch) for group, batch in by_group.items()))


def _sessions_of_runs(run_ids: list[int]) -> list[tuple[int, Any, int]]:
    from agents.models import Run

    return list(Run._base_manager.filter(pk__in=run_ids).values_list("pk", "session_id", "tenant_id"))


def slim(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload``, or its stub when too big to relay (``too_big``: ask for it)."""
    if payload.keys() <= _DELTA_KEYS and len(payload.get("text") or "") <= MAX_MERGED_CHARS:
        # A text delta is never cut: the layer carries a message too big for a
        # notification through its table.
        return payload
    if len(json.dumps(payload, default=str)) <= MAX_RELAYED_PAYLOAD_CHARS:
        return payload
    small: dict[str, Any] = {
        k: v for k, v in payload.items() if isinstance(v, int | float | bool) or v is None
    }
    small.update({k: v for k, v in payload.items() if isinstance(v, str) and len(v) <= 200})
    return {**small, "too_big": True}
