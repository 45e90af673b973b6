"""The default channel layer: channels_postgres (LISTEN/NOTIFY), with its delivery fixed.

channels_postgres 1.1.4 is the PostgreSQL layer DESIGN names, but as shipped it
delivers messages more than once and can lose them:

- every ``receive`` that arrives before the listener is up starts *another* listener
  (and so does every call from a second event loop), and each listener queues every
  notification, so a browser gets each token batch two or three times;
- a starting listener deletes every unexpired message of *every* channel in the
  database (other processes' too) and queues them, duplicating what its NOTIFY brings;
- its connection pool is a module global bound to the first event loop, so a second
  loop in the same process (the worker's run loop, tests) cannot use it;
- it takes a PostgreSQL advisory lock per channel and never releases it, so a
  long-running server exhausts the shared lock table;
- a listener whose connection drops (PostgreSQL restarted) dies, and its sockets
  stay open but deaf.

:class:`PostgresChannelLayer` keeps the library's tables, trigger and wire format and
replaces those parts: no advisory locks (channel names are random per process);
one listener per event loop, started once and reconnected with
backoff; after (re)connecting it *reads* (never deletes) the unexpired messages of its
own channels, and delivery is de-duplicated by message id; one pool per event loop whose
connections commit without waiting for the disk (the tables are UNLOGGED too: a
layer message lives a minute); ``group_send`` in one statement instead of three
round trips, and each statement notified once (up to 8,000 bytes of messages per
notification, one per line: the ``ops`` migration 0004), not once per message.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import OrderedDict
from typing import Any

import psycopg
from channels_postgres import core
from channels_postgres.db import GROUP_CHANNEL_TABLE, MESSAGE_TABLE, DatabaseLayer
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from claw_platform.loop_local import LoopLocal

logger = logging.getLogger("claw.channel_layer")

NOTIFY_CHANNEL = "channels_postgres_messages"
# Delivered message ids remembered per layer, to drop the second copy of a message
# that arrives both by NOTIFY and by the catch-up read after a (re)connect.
SEEN_IDS = 50_000
RECONNECT_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)
VALID_GROUPS = 10_000  # group names remembered as checked

# Group messages in one statement (one commit, so one turn at PostgreSQL's NOTIFY
# commit lock, whatever their number): the rows come out in the order the messages
# were sent, so their ids (and notifications) keep each sender's order. A channel in
# a group twice still gets one copy. Prepared, with binary parameters (``%b``: with
# ``%s`` psycopg quotes an array of strings or bytes as text, 2-6 us an element, a
# tenth of the worker's CPU per relayed token in bench/stream).
_GROUP_SEND_SQL = (
    "INSERT INTO channels_postgres_message (channel, message, expire) "
    "SELECT DISTINCT ON (v.ord, g.channel) g.channel, v.message, %b "
    "FROM unnest(%b::text[], %b::bytea[]) WITH ORDINALITY AS v(group_key, message, ord) "
    "JOIN channels_postgres_groupchannel g ON g.group_key = v.group_key ORDER BY v.ord, g.channel"
)
assert MESSAGE_TABLE == "channels_postgres_message"  # the library's tables, named above
assert GROUP_CHANNEL_TABLE == "channels_postgres_groupchannel"
_GROUP_ADD_SQL = sql.SQL("INSERT INTO {groups} (group_key, channel, expire) VALUES (%s, %s, %s)").format(
    groups=sql.Identifier(GROUP_CHANNEL_TABLE)
)
_GROUP_DISCARD_SQL = sql.SQL("DELETE FROM {groups} WHERE group_key = %s AND channel = %s").format(
    groups=sql.Identifier(GROUP_CHANNEL_TABLE)
)
_PENDING_SQL = sql.SQL(
    "SELECT id, channel, message, extract(epoch from expire) FROM {messages} "
    "WHERE channel = ANY(%b::text[]) AND expire > now() ORDER BY id"
).format(messages=sql.Identifier(MESSAGE_TABLE))
_EXPIRED_SQL = sql.SQL("DELETE FROM {messages} WHERE expire < now()").format(
    messages=sql.Identifier(MESSAGE_TABLE)
)


class _PoolPerLoop(DatabaseLayer):  # type: ignore[misc]
    """channels_postgres' database helper with one connection pool per event loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools: dict[asyncio.AbstractEventLoop, asyncio.Future[AsyncConnectionPool]] = {}

    async def get_db_pool(self, db_params: dict[str, Any]) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        opening = self._pools.get(loop)
        if opening is None:
            for old in [other for other in self._pools if other.is_closed()]:
                del self._pools[old]
            opening = self._pools[loop] = asyncio.ensure_future(self._open_pool(db_params))
        return await asyncio.shield(opening)

    async def close_loop_pool(self) -> None:
        """Close this event loop's pool (a loop about to be closed: its pool's
        worker tasks would be destroyed pending)."""
        opening = self._pools.pop(asyncio.get_running_loop(), None)
        if opening is None:
            return
        try:
            await (await opening).close()
        except Exception as exc:  # a pool that never opened, a database already gone
            logger.warning("closing the channel layer's connection pool failed: %s", exc)

    async def _open_pool(self, db_params: dict[str, Any]) -> AsyncConnectionPool:
        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.set_autocommit(True)
            # Layer messages live a minute and are never needed after a crash: a
            # commit need not wait for the disk.
            await conn.execute("SET synchronous_commit TO off")

        pool = AsyncConnectionPool(
            conninfo=psycopg.conninfo.make_conninfo(conninfo="", **db_params),
            open=False,
            configure=configure,
            # No check per checkout (a round trip per message): a connection a
            # database restart broke fails once, is dropped, and the pool refills.
            **self.psycopg_options,
        )
        await pool.open(wait=True)
        return pool


class PostgresChannelLayer(core.PostgresChannelLayer):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.django_db = _PoolPerLoop(kwargs.get("PSYCOPG_OPTIONS", {}), self.db_params, logger=logger)
        self._listeners: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
        self._listener_tasks: set[asyncio.Task[None]] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._last_cleanup = 0.0
        self._sends = LoopLocal(lambda: _SendBatch(self))
        self._valid_groups: set[str] = set()
        # A registered channel's loop and queue: its later receives skip the checks.
        self._ready_queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[str]]] = {}

    async def close_loop(self) -> None:
        """Release what this layer holds on the running event loop (its connection
        pool), before the loop is closed."""
        await self.django_db.close_loop_pool()

    # ------------------------------------------------------------------ receive

    async def receive(self, channel: str) -> dict[str, Any]:
        # A channel registered on this loop (whose listener was up then, and stays up
        # for the loop's life) goes straight to its queue.
        queue = self._ready_queues.get(channel)
        if queue is not None and queue[0] is asyncio.get_running_loop():
            return await self._get_message_from_channel(channel, queue[1])
        return await self._receive_first(channel)

    async def _receive_first(self, channel: str) -> dict[str, Any]:
        if not (self._channel_advisory_locks.get(channel) and self._listening_here()):
            # First receive on this channel (or this loop): check it, register it.
            assert self.require_valid_channel_name(channel), "Channel name not valid"
            if "!" in channel:
                assert self.non_local_name(channel).endswith(self.client_prefix + "!"), "Wrong client prefix"
            self._get_or_create_queue(channel)
            await self._get_or_create_channel_advisory_lock(channel)
            await self._listening()
        queue = core.ASYNCIO_EVENT_CHANNEL_MAPPING[channel]
        self._ready_queues[channel] = (asyncio.get_running_loop(), queue)
        return await self._get_message_from_channel(channel, queue)

    def release_channel(self, channel: str) -> None:
        """Forget a channel whose consumer has ended: the library keeps a queue and an
        entry per channel for the life of the process (one per socket ever opened).
        Notifications still on their way to it are dropped as another process's."""
        self._channel_advisory_locks.pop(channel, None)
        self._ready_queues.pop(channel, None)
        core.ASYNCIO_EVENT_CHANNEL_MAPPING.pop(channel, None)

    def _listening_here(self) -> bool:
        ready = self._listeners.get(asyncio.get_running_loop())
        return ready is not None and ready.done() and not ready.cancelled() and ready.exception() is None

    async def _get_or_create_channel_advisory_lock(self, channel: str) -> bool:
        # The library takes a session-level advisory lock per channel on a pooled
        # connection and never releases it: one lock per socket ever opened, until
        # PostgreSQL's shared lock table runs out. Channel names are random per
        # process, so no other process can hold ours: remembering it is enough.
        self._channel_advisory_locks[channel] = True
        return True

    async def _get_message_from_channel(self, channel: str, queue: asyncio.Queue[str]) -> dict[str, Any]:
        while True:
            payload = await queue.get()
            parts = payload.split(":")
            if len(parts) == 4:
                _, _, encoded, expires = parts
                if float(expires) < time.time():
                    continue
                return self.deserialize(base64.b64decode(encoded))
            # Too big for a notification: the row holds it; take it (once).
            row = await self.django_db.delete_message_returning_message(int(parts[0]))
            if row is not None:
                return self.deserialize(row[0])

    async def _listening(self) -> None:
        """Wait until this event loop's listener is up (starting it if needed)."""
        loop = asyncio.get_running_loop()
        ready = self._listeners.get(loop)
        if ready is None:
            for old in [other for other in self._listeners if other.is_closed()]:
                del self._listeners[old]
            ready = self._listeners[loop] = loop.create_future()
            task = loop.create_task(self._listen(ready))
            self._listener_tasks.add(task)
            task.add_done_callback(self._listener_tasks.discard)
        await asyncio.shield(ready)

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        conninfo = psycopg.conninfo.make_conninfo(conninfo="", **self.db_params)
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                    # Listening now; anything sent to our channels before this moment
                    # (or while the connection was down) is still in the table.
                    await self._catch_up(conn)
                    if not ready.done():
                        ready.set_result(None)
                    failures = 0
                    async for notify in conn.notifies():
                        if notify.payload == "1:shutdown":
                            return
                        self._deliver_all(notify.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                logger.warning(
                    "channel layer listener lost its connection (%s); retrying in %.1fs", exc, delay
                )
                await asyncio.sleep(delay)

    async def _catch_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        channels = [name for name, locked in self._channel_advisory_locks.items() if locked]
        if not channels:
            return
        cursor = await conn.execute(_PENDING_SQL, (channels,))
        for message_id, channel, message, expires in await cursor.fetchall():
            encoded = base64.b64encode(message).decode()
            self._deliver(f"{message_id}:{channel}:{encoded}:{expires}")

    def _deliver_all(self, payload: str) -> None:
        """A notification: one entry per line (a statement's messages, see the
        ``ops`` migration 0004), each as the library's payload."""
        for entry in payload.split("\n"):
            self._deliver(entry)

    def _deliver(self, payload: str) -> None:
        # "<id>:<channel>:<message>:<expiry>", or "<id>:<channel>" for a big message.
        first = payload.find(":")
        second = payload.find(":", first + 1)
        message_id, channel = payload[:first], payload[first + 1 : second if second > 0 else None]
        if not self._channel_advisory_locks.get(channel):
            return  # another process's channel
        if message_id in self._seen:
            return
        self._seen[message_id] = None
        if len(self._seen) > SEEN_IDS:
            self._seen.popitem(last=False)
        self._get_or_create_queue(channel).put_nowait(payload)

    # ------------------------------------------------------------------- groups

    async def group_add(self, group: str, channel: str) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        await self._execute(_GROUP_ADD_SQL, (self._group_key(group), channel, _expiry(self.group_expiry)))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        """Sent with whatever other group messages this event loop sends meanwhile
        (see :meth:`group_send_many`); returns once the message is committed."""
        await self.group_send_many([(group, message)])

    async def group_send_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """Send (group, message) pairs in this order. While one statement of this event
        loop is in flight the next messages queue, and go out together in the next
        (a burst of 200 streams' tokens is one commit, not 200). Returns once all of
        them are committed."""
        for group, _message in messages:
            if group not in self._valid_groups:
                # A stream sends to the same group hundreds of times: checked once.
                assert self.require_valid_group_name(group), "Group name not valid"
                if len(self._valid_groups) >= VALID_GROUPS:
                    self._valid_groups.clear()
                self._valid_groups.add(group)
        if not messages:
            return
        await self._sends.get().send(
            [(self._group_key(group), self.serialize(message)) for group, message in messages]
        )

    async def group_discard(self, group: str, channel: str, expire: int | None = None) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        await self._execute(_GROUP_DISCARD_SQL, (self._group_key(group), channel))
        # Delivered small messages stay until they expire; sweep now and then.
        if time.monotonic() - self._last_cleanup > self.expiry:
            self._last_cleanup = time.monotonic()
            await self._execute(_EXPIRED_SQL, ())

    async def _execute(self, statement: Any, params: tuple[Any, ...], *, prepared: bool = False) -> None:
        """One statement on a pooled connection. A database restart breaks every idle
        connection of the pool: the first failure has the pool test them all (and
        drop the dead), then the statement runs once more. ``prepared``: a hot
        statement, prepared on each connection and sent with binary parameters."""
        pool = await self.django_db.get_db_pool(db_params=self.db_params)
        for attempt in (1, 2):
            try:
                async with pool.connection() as conn:
                    if prepared:
                        await conn.execute(statement, params, prepare=True, binary=True)
                    else:
                        await conn.execute(statement, params)
                return
            except psycopg.OperationalError:
                if attempt == 2:
                    raise
                await pool.check()


class _SendBatch:
    """The group messages one event loop has waiting, and the task that writes them."""

    MAX_MESSAGES = 500  # per statement

    def __init__(self, layer: PostgresChannelLayer) -> None:
        self.layer = layer
        # (group key, serialized message, its caller's future, last of the caller's)
        self.pending: list[tuple[str, bytes, asyncio.Future[None], bool]] = []
        self.writer: asyncio.Task[None] | None = None

    async def send(self, messages: list[tuple[str, bytes]]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        last = len(messages) - 1
        self.pending.extend((key, data, done, n == last) for n, (key, data) in enumerate(messages))
        if self.writer is None or self.writer.done():
            self.writer = asyncio.ensure_future(self._write())
        await done

    async def _write(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[: self.MAX_MESSAGES], self.pending[self.MAX_MESSAGES :]
            try:
                await self.layer._execute(
                    _GROUP_SEND_SQL,
                    (_expiry(self.layer.expiry), [b[0] for b in batch], [b[1] for b in batch]),
                    prepared=True,
                )
            except Exception as exc:
                # Every caller with a message in the statement fails, even if its
                # other messages go out in the next one.
                for _key, _data, done, _last in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _key, _data, done, last in batch:
                    if last and not done.done():
                        done.set_result(None)


def _expiry(seconds: int) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(seconds=seconds)
