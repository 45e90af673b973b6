"""A JSON WebSocket consumer built for many live streams in one process.

channels' ``AsyncConsumer`` is right but costly at thousands of relayed messages a
second: for every message it waits on both sources with ``asyncio.wait`` (a future
and callbacks on each), starts a new task for the next receive, and before each
handler hops to asgiref's one shared thread to close stale database connections. At
200 streams that hop alone queued every token of every socket behind each other's,
seconds deep.

:class:`LiveJsonConsumer` keeps its contract (handlers named by message type, one
handler at a time per socket, ``StopConsumer`` ends it) with one long-lived task per
source and a lock that serialises the handlers. Handlers that use the database do
so through ``claw_platform.db.db_async``, which looks after the thread's connection.
When the socket ends, a layer that keeps per-channel state
(``claw_platform.channel_layer``) is told to drop the channel's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer

from claw_platform.json_input import JsonInputError, parse_json

logger = logging.getLogger(__name__)

CLOSE_UNREADABLE = 4400


class LiveJsonConsumer(AsyncJsonWebsocketConsumer):
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.base_send = send
        # A socket relays thousands of messages of a few types: each type's handler
        # is looked up once (``dispatch``).
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]] = {}
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources: list[Callable[[], Awaitable[dict[str, Any]]]] = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            channel_name = self.channel_name
            layer = self.channel_layer
            sources.append(lambda: layer.receive(channel_name))
        turn = asyncio.Lock()

        async def pump(source: Callable[[], Awaitable[dict[str, Any]]]) -> None:
            while True:
                message = await source()
                async with turn:
                    await self.dispatch(message)

        tasks = [asyncio.ensure_future(pump(source)) for source in sources]
        errors: list[Exception] = []
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                try:
                    await task
                except (asyncio.CancelledError, StopConsumer):
                    pass
                except Exception as exc:  # the handler's error
                    errors.append(exc)
            release = getattr(self.channel_layer, "release_channel", None)
            if release is not None:
                release(self.channel_name)
        # Both sources can fail in the same turn of the loop: the first error ends the
        # consumer as before, and the other is logged rather than lost.
        for extra in errors[1:]:
            logger.error("another handler of the socket failed too", exc_info=extra)
        if errors:
            raise errors[0]

    async def dispatch(self, message: dict[str, Any]) -> None:
        handler = self._handlers.get(message.get("type", ""))
        if handler is None:
            handler = getattr(self, get_handler_name(message), None)
            if handler is None:
                raise ValueError(f"No handler for message type {message['type']}")
            self._handlers[message["type"]] = handler
        await handler(message)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """A client frame, parsed by the product's one JSON parser (depth limit, no NUL,
        no lone surrogates): what it refuses goes to :meth:`receive_unreadable`."""
        try:
            content = parse_json(text_data if text_data is not None else (bytes_data or b""))
        except JsonInputError as exc:
            await self.receive_unreadable(exc.message)
            return
        await self.receive_json(content, **kwargs)

    async def receive_unreadable(self, reason: str) -> None:
        """A frame that is not JSON this product takes. By default the socket closes
        (4400); a consumer may answer with an error frame instead."""
        await self.close(code=CLOSE_UNREADABLE)

    async def send_text(self, text: str) -> None:
        """One text frame, straight to the server (``send(text_data=...)`` without
        its two layers of indirection, for the relayed frames of every live stream)."""
        await self.base_send({"type": "websocket.send", "text": text})
