"""Discord's Gateway (v10, JSON): the WebSocket that brings messages to a bot, so a
channel needs no public URL for them (discord.com/developers/docs/events/gateway).

:class:`GatewayConnection` speaks the protocol: ``HELLO`` gives the heartbeat
interval; ``IDENTIFY`` (or ``RESUME`` with the session id and the last sequence
number after a drop, so missed events are replayed); a heartbeat every interval, and
a connection whose heartbeat went unacknowledged is dropped as a zombie; ``RECONNECT``
and ``INVALID_SESSION`` lead to a new connection (resumed when Discord allows).
Every ``MESSAGE_CREATE`` goes to ``on_message`` before the next frame is read.

It runs inside a worker (``channels_app.polling``) under the channel's lease:
``keep_lease`` is called every few seconds and a lost lease closes the connection,
so no second holder ever serves the same bot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from channels_app.adapters.discord.adapter import DiscordAdapter, DiscordError

logger = logging.getLogger("claw.channels.discord")

DISPATCH, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HELLO, HEARTBEAT_ACK = (
    0,
    1,
    2,
    6,
    7,
    9,
    10,
    11,
)
# GUILD_MESSAGES | DIRECT_MESSAGES: a mention or a DM carries its content without the
# privileged MESSAGE_CONTENT intent, and those are all the agent answers.
INTENTS = (1 << 9) | (1 << 12)
# Close codes after which reconnecting cannot help (bad token, bad intents …).
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})
MAX_FRAME_BYTES = 4 * 1024 * 1024
TICK_SECONDS = 0.25


@dataclass
class GatewayState:
    """What a resume needs, kept across connections of one holder."""

    session_id: str = ""
    resume_url: str = ""
    seq: int | None = None


class LeaseLost(Exception):
    pass


class GatewayConnection:
    def __init__(
        self,
        adapter: DiscordAdapter,
        state: GatewayState,
        *,
        on_message: Callable[[dict[str, Any]], Awaitable[None]],
        keep_lease: Callable[[], Awaitable[bool]],
        stop: threading.Event,
        lease_every: float = 20.0,
    ) -> None:
        self.adapter = adapter
        self.state = state
        self.on_message = on_message
        self.keep_lease = keep_lease
        self.stop = stop
        self.lease_every = lease_every
        self.acked = True

    async def run(self) -> None:
        """One connection, until it closes; raises :class:`LeaseLost` or a
        :class:`DiscordError` (``retryable`` False for a fatal close code)."""
        url = self.state.resume_url if self.state.session_id else await self.adapter.gateway_url()
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(f"{url.rstrip('/')}/?v=10&encoding=json", max_msg_size=MAX_FRAME_BYTES) as ws,
        ):
            hello = await self._receive(ws, wait=30)
            if hello.get("op") != HELLO:
                raise DiscordError("discord gateway: no HELLO", retryable=True)
            interval = float((hello.get("d") or {}).get("heartbeat_interval", 41250)) / 1000
            await ws.send_json(self._identify_or_resume())
            keeper = asyncio.ensure_future(self._keep_alive(ws, interval))
            try:
                await self._read(ws)
            finally:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)
                if keeper.done() and not keeper.cancelled() and isinstance(keeper.exception(), LeaseLost):
                    raise LeaseLost()
            code = ws.close_code
            if code in FATAL_CLOSE_CODES:
                raise DiscordError(f"discord gateway closed: {code}", retryable=False)

    def _identify_or_resume(self) -> dict[str, Any]:
        token = self.adapter.channel.bot_token
        if self.state.session_id:
            return {
                "op": RESUME,
                "d": {"token": token, "session_id": self.state.session_id, "seq": self.state.seq},
            }
        properties = {"os": "linux", "browser": "claw-platform", "device": "claw-platform"}
        return {"op": IDENTIFY, "d": {"token": token, "intents": INTENTS, "properties": properties}}

    @staticmethod
    async def _receive(ws: aiohttp.ClientWebSocketResponse, *, wait: float | None = None) -> dict[str, Any]:
        frame = await ws.receive(timeout=wait)
        if frame.type != aiohttp.WSMsgType.TEXT:
            return {"op": -1, "close": True}
        data = json.loads(frame.data)
        return data if isinstance(data, dict) else {}

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            frame = await self._receive(ws)
            op = frame.get("op")
            if frame.get("close"):
                return
            if op == HEARTBEAT_ACK:
                self.acked = True
            elif op == HEARTBEAT:
                await ws.send_json({"op": HEARTBEAT, "d": self.state.seq})
            elif op == RECONNECT:
                await ws.close(code=4900)
                return
            elif op == INVALID_SESSION:
                if not frame.get("d"):
                    self.state.session_id = ""
                    self.state.seq = None
                await ws.close(code=4900)
                return
            elif op == DISPATCH:
                await self._dispatch(frame)

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        if isinstance(frame.get("s"), int):
            self.state.seq = frame["s"]
        data = frame.get("d")
        if frame.get("t") == "READY" and isinstance(data, dict):
            self.state.session_id = str(data.get("session_id", ""))
            self.state.resume_url = str(data.get("resume_gateway_url", ""))
        elif frame.get("t") == "MESSAGE_CREATE" and isinstance(data, dict):
            await self.on_message(data)

    async def _keep_alive(self, ws: aiohttp.ClientWebSocketResponse, interval: float) -> None:
        """Heartbeats every ``interval`` (the first after a random fraction of it, as
        Discord asks), the lease every ``lease_every``; closes the socket on a zombie
        connection, a stop, or a lost lease."""
        next_beat = time.monotonic() + interval * secrets.randbelow(1000) / 1000
        next_lease = time.monotonic() + self.lease_every
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= next_lease:
                    if not await self.keep_lease():
                        raise LeaseLost()
                    next_lease = now + self.lease_every
                if now >= next_beat:
                    if not self.acked:
                        logger.info("discord gateway: heartbeat not acknowledged, reconnecting")
                        break
                    self.acked = False
                    await ws.send_json({"op": HEARTBEAT, "d": self.state.seq})
                    next_beat = now + interval
                await asyncio.sleep(TICK_SECONDS)
        finally:
            await ws.close(code=4900)
