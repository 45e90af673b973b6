"""The channel-layer relay for run events (U1): every event of a run goes to the group
of the run's session, where each open ``SessionConsumer`` passes it to its browser.

Text deltas arrive already coalesced by the engine (``agents.engine.streaming``: about
80 characters or 40 ms a batch), so one relayed chunk is one channel-layer message --
with ``channels_postgres`` one row and one NOTIFY -- not one per token.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from channels.layers import get_channel_layer

from agents.runtime.events import EPHEMERAL_EVENTS
from claw_platform.db import db_async

logger = logging.getLogger(__name__)

# The consumer method that receives relayed events (``SessionConsumer.run_event``).
RUN_EVENT_MESSAGE = "run.event"
# Relayed payloads stay small: PostgreSQL's NOTIFY carries up to 8,000 bytes, and a
# bigger layer message costs every receiver a database round trip to fetch it. A
# bigger stored event (a long final reply, a large tool preview) is relayed as a
# stub; the client reads it whole from the database with ``resume``.
MAX_RELAYED_PAYLOAD_CHARS = 4_000


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

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        known = self._sessions.get(run_id)
        if known is None:
            known = await db_async(_session_of_run)(run_id)
            if known is None:
                return
            self._sessions[run_id] = known
            while len(self._sessions) > self.MAX_KNOWN_RUNS:
                self._sessions.popitem(last=False)
        session_id, tenant_id = known
        await self.publish(
            session_id=session_id,
            run_id=run_id,
            seq=seq,
            event_type=event_type,
            payload=payload,
            tenant_id=tenant_id,
        )

    async def publish(
        self,
        *,
        session_id: Any,
        run_id: Any,
        seq: int,
        event_type: str,
        payload: dict[str, Any],
        tenant_id: Any = None,
    ) -> None:
        """To the session's group; a stored event (not chunk/thinking) also to the
        tenant's group when ``tenant_id`` is given (the API's event stream, U5)."""
        layer = get_channel_layer(self.layer_alias)
        if layer is None:
            return
        message = {"type": RUN_EVENT_MESSAGE, "event": event_frame(run_id, seq, event_type, slim(payload))}
        try:
            await layer.group_send(session_group(session_id), message)
            if tenant_id is not None and event_type not in EPHEMERAL_EVENTS:
                await layer.group_send(tenant_group(tenant_id), message)
        except Exception:
            logger.exception("relaying %s of run %s to session %s failed", event_type, run_id, session_id)


def _session_of_run(run_id: int) -> tuple[Any, int] | None:
    from agents.models import Run

    return Run._base_manager.filter(pk=run_id).values_list("session_id", "tenant_id").first()


def slim(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload``, or its stub when too big to relay (``too_big``: ask for it)."""
    if len(json.dumps(payload, default=str)) <= MAX_RELAYED_PAYLOAD_CHARS:
        return payload
    small: dict[str, Any] = {
        k: v for k, v in payload.items() if isinstance(v, int | float | bool) or v is None
    }
    small.update({k: v for k, v in payload.items() if isinstance(v, str) and len(v) <= 200})
    return {**small, "too_big": True}
