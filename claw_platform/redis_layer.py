"""The Redis channel layer (``CHANNEL_LAYER_URL=redis://…``): channels_redis's pub/sub
layer, made to lose nothing silently.

channels_redis's list-based ``RedisChannelLayer`` drops what is sent to a channel that
holds ``capacity`` unread messages, without a word, and costs several round trips per
message (a group's members are read, then each gets a Lua script). Its
``RedisPubSubChannelLayer`` publishes a group message once (``PUBLISH``), and each
process fans it out to its own sockets. As shipped that layer still loses messages
in four ways, which :class:`RedisChannelLayer` closes or makes visible:

- ``receive`` cancelled (``asyncio.wait_for`` timing out) unsubscribes the channel:
  messages sent to it in the meantime went nowhere. Here a channel lives until
  ``release_channel`` (the consumer ended) or ``flush``.
- ``group_add`` returned before Redis confirmed the ``SUBSCRIBE``: a message published
  in between missed the new socket, after it had read the stored events. Here it
  returns once Redis has confirmed it.
- A subscriber that reconnects (Redis restarted, or it closed the connection because
  the process read too slowly: ``client-output-buffer-limit pubsub``) missed whatever
  was published meanwhile; a publish that fails reaches nobody. Here each of the
  process's channels (or each group the failed publish was for, with the next publish
  that works) receives a ``layer.gap`` message: the session socket tells its client
  to resume from the stored events (``{"type": "resync"}``).
- A channel's queue is unbounded; a consumer that stops reading grows it without end.
  Here a channel holding ``capacity`` unread messages has them dropped, is given a
  ``layer.gap`` message instead, and the drop is logged.

``group_send_many`` publishes a batch of group messages in one pipeline (one round
trip per Redis host), as the worker's relay pump hands over every streaming run's
deltas at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, RedisSingleShardConnection
from channels_redis.utils import _wrap_close, decode_hosts
from redis.asyncio.client import PubSub

logger = logging.getLogger("claw.channel_layer")

GAP_MESSAGE_TYPE = "layer.gap"
GAP = object()  # a channel's queue entry: messages were lost here
DEFAULT_CAPACITY = 10_000  # unread messages a channel may hold before they are dropped
SUBSCRIBE_WAIT = 10.0  # seconds group_add waits for Redis to confirm a subscription


class RedisChannelLayer(RedisPubSubChannelLayer):  # type: ignore[misc]
    """channels_redis's pub/sub layer with the fixes above; one set of Redis
    connections per event loop, as the library's."""

    def __init__(self, *args: Any, capacity: int = DEFAULT_CAPACITY, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self._gap = self.serialize({"type": GAP_MESSAGE_TYPE})

    def _get_layer(self) -> _LoopLayer:
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            _wrap_close(self, loop)
        return layer  # type: ignore[no-any-return]

    async def group_send_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Publish (group, message) pairs in one pipeline per Redis host: each group's
        messages arrive in this order."""
        await self._get_layer().group_send_many(messages)

    def release_channel(self, channel: str) -> None:
        """Forget a channel whose consumer has ended (and its groups' subscriptions
        when it was their last member here)."""
        self._get_layer().release_channel(channel)

    async def close_loop(self) -> None:
        """Close this event loop's Redis connections (a worker's run loop, before it
        is closed)."""
        layer = self._layers.pop(asyncio.get_running_loop(), None)
        if layer is not None:
            await layer.flush()


class _LoopLayer(RedisPubSubLoopLayer):  # type: ignore[misc]
    channel_layer: RedisChannelLayer

    def __init__(self, hosts: Any = None, **kwargs: Any) -> None:
        super().__init__(hosts, **kwargs)
        self._shards = [_Shard(host, self) for host in decode_hosts(hosts)]
        self._releasing: set[asyncio.Task[None]] = set()

    async def receive(self, channel: str) -> dict[str, Any]:
        # Unlike the library's, a cancelled receive keeps the channel subscribed.
        if channel not in self.channels:
            await self._subscribe_to_channel(channel)
        data = await self.channels[channel].get()
        if data is GAP:
            return {"type": GAP_MESSAGE_TYPE}
        return self.channel_layer.deserialize(data)  # type: ignore[no-any-return]

    def deliver(self, channel: str, data: Any) -> None:
        """Queue ``data`` for ``channel``; past its capacity, drop what it holds for
        one ``layer.gap`` (the consumer is not reading: its client resumes later)."""
        queue = self.channels.get(channel)
        if queue is None:
            return
        if queue.qsize() >= self.channel_layer.capacity:
            dropped = 0
            while not queue.empty():
                queue.get_nowait()
                dropped += 1
            logger.warning(
                "channel %s held %d unread messages: dropped, its client resumes", channel, dropped
            )
            data = GAP
        queue.put_nowait(data)

    def mark_gap(self, channels: Any = None) -> None:
        """Tell ``channels`` (all of this loop's by default) that messages were lost."""
        for channel in list(self.channels if channels is None else channels):
            self.deliver(channel, GAP)

    async def group_send_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        by_shard: dict[_Shard, list[tuple[str, bytes]]] = defaultdict(list)
        for group, message in messages:
            name = self._get_group_channel_name(group)
            by_shard[self._get_shard(name)].append((name, self.channel_layer.serialize(message)))
        await asyncio.gather(*(shard.publish_many(items) for shard, items in by_shard.items()))

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await self._get_shard(channel).publish_many([(channel, self.channel_layer.serialize(message))])

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        await self.group_send_many([(group, message)])

    def release_channel(self, channel: str) -> None:
        self.channels.pop(channel, None)
        names = [channel]
        for group, members in list(self.groups.items()):
            members.discard(channel)
            if not members:
                del self.groups[group]
                names.append(group)

        async def unsubscribe() -> None:
            for name in names:
                await self._get_shard(name).unsubscribe(name)

        task = asyncio.ensure_future(unsubscribe())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    def channels_of(self, name: str) -> list[str]:
        """The channels here that a message to ``name`` (a channel or a group's) reaches."""
        if name in self.channels:
            return [name]
        return list(self.groups.get(name, ()))


class _GapAwarePubSub(PubSub):  # type: ignore[misc]
    """redis-py's PubSub, which re-subscribes by itself after a reconnect: a second
    connect means whatever was published meanwhile was missed."""

    shard: _Shard | None = None
    connects = 0

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)
        self.connects += 1
        if self.connects > 1 and self.shard is not None:
            logger.warning("the channel layer's subscription to Redis reconnected: its sockets resume")
            self.shard.channel_layer.mark_gap()


class _Shard(RedisSingleShardConnection):  # type: ignore[misc]
    channel_layer: _LoopLayer
    _redis: Any
    _pubsub: Any

    def __init__(self, host: dict[str, Any], channel_layer: _LoopLayer) -> None:
        super().__init__(host, channel_layer)
        self._confirmed: dict[str, asyncio.Future[None]] = {}
        self._failed: set[str] = set()  # channels whose messages a failed publish lost

    def _ensure_redis(self) -> None:
        if self._redis is None:
            super()._ensure_redis()
            assert self._redis is not None
            pubsub = _GapAwarePubSub(self._redis.connection_pool)
            pubsub.shard = self
            self._pubsub = pubsub

    async def publish_many(self, items: list[tuple[str, bytes]]) -> None:
        async with self._lock:
            self._ensure_redis()
            failed = sorted(self._failed)
            pipe = self._redis.pipeline(transaction=False)
            for name in failed:
                pipe.publish(name, self.channel_layer.channel_layer._gap)
            for name, data in items:
                pipe.publish(name, data)
            try:
                await pipe.execute()
            except Exception:
                # Nobody got these: the next publish that works tells their listeners.
                self._failed.update(name for name, _ in items)
                raise
            self._failed.difference_update(failed)

    async def subscribe(self, channel: str) -> None:
        async with self._lock:
            confirmed = self._confirmed.get(channel)
            if channel not in self._subscribed_to:
                self._ensure_redis()
                self._ensure_receiver()
                confirmed = self._confirmed[channel] = asyncio.get_running_loop().create_future()
                await self._pubsub.subscribe(channel)
                self._subscribed_to.add(channel)
        if confirmed is not None and not confirmed.done():
            await asyncio.wait_for(asyncio.shield(confirmed), SUBSCRIBE_WAIT)

    async def flush(self) -> None:
        await super().flush()
        for future in self._confirmed.values():
            future.cancel()
        self._confirmed.clear()

    async def _do_receiving(self) -> None:
        while True:
            try:
                if self._pubsub and self._pubsub.subscribed:
                    message = await self._pubsub.get_message(timeout=0.5)
                    if message is not None:
                        self._receive_message(message)
                else:
                    await asyncio.sleep(0.1)
            except (asyncio.CancelledError, TimeoutError, GeneratorExit):
                raise
            except Exception:
                # The connection broke: what was published until it is back is lost.
                logger.exception("the channel layer's Redis subscription failed; its sockets resume")
                self.channel_layer.mark_gap()
                await asyncio.sleep(0.5)

    def _receive_message(self, message: dict[str, Any]) -> None:
        name = message["channel"]
        if isinstance(name, bytes):
            name = name.decode()
        if message["type"] == "subscribe":
            confirmed = self._confirmed.pop(name, None)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(None)
            return
        if message["type"] != "message":
            return
        for channel in self.channel_layer.channels_of(name):
            self.channel_layer.deliver(channel, message["data"])
