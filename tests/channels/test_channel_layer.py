"""The PostgreSQL channel layer (claw_platform.channel_layer): each message reaches each
receiver exactly once, also when many receivers start together, when a message is
sent before the listener is up, and after the listener's connection is killed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from psycopg.types.array import ListDumper

from claw_platform import config
from claw_platform.channel_layer import PostgresChannelLayer

pytestmark = pytest.mark.django_db(transaction=True)


def new_layer() -> PostgresChannelLayer:
    cfg: dict[str, Any] = config.channel_layer_config("postgres", dict(connection.settings_dict))["CONFIG"]
    return PostgresChannelLayer(**cfg)


async def drain(layer: PostgresChannelLayer, channel: str, wait: float = 0.5) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while True:
        try:
            got.append(await asyncio.wait_for(layer.receive(channel), wait))
        except TimeoutError:
            return got


async def test_concurrent_receivers_each_get_every_group_message_once() -> None:
    layer = new_layer()
    channels = [await layer.new_channel() for _ in range(5)]
    for channel in channels:
        await layer.group_add("session_x", channel)
    # All receivers start at once, before any listener exists (the library started
    # one listener per receive here, and each queued every notification).
    receivers = [asyncio.ensure_future(layer.receive(c)) for c in channels]
    await asyncio.sleep(0.3)
    for n in range(3):
        await layer.group_send("session_x", {"type": "run.event", "n": n})
    first = await asyncio.gather(*receivers)
    assert [m["n"] for m in first] == [0] * 5
    for channel in channels:
        assert [m["n"] for m in await drain(layer, channel)] == [1, 2]


async def test_concurrent_group_sends_share_statements_and_keep_each_senders_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = new_layer()
    groups = [f"session_batch{i}" for i in range(20)]
    channels = {}
    for group in groups:
        channels[group] = await layer.new_channel()
        await layer.group_add(group, channels[group])
    await layer.group_add(groups[0], channels[groups[0]])  # added twice: still one copy
    other = await layer.new_channel()  # in no group: gets nothing
    for channel in [*channels.values(), other]:
        assert await drain(layer, channel, wait=0.01) == []  # listening, as a consumer is
    statements: list[int] = []  # messages per statement
    execute = layer._execute

    async def counting(statement: Any, params: tuple[Any, ...], **options: Any) -> None:
        statements.append(len(params[1]))
        await execute(statement, params, **options)

    monkeypatch.setattr(layer, "_execute", counting)

    async def sender(group: str) -> None:
        for n in range(10):
            await layer.group_send(group, {"type": "run.event", "group": group, "n": n})

    await asyncio.gather(*(sender(g) for g in groups))
    assert sum(statements) == 200
    assert len(statements) < 100  # while one statement ran, the others' messages queued
    for group in groups:
        got = await drain(layer, channels[group])
        assert [(m["group"], m["n"]) for m in got] == [(group, n) for n in range(10)]
    assert await drain(layer, other, wait=0.2) == []


async def test_a_group_send_binds_its_arrays_in_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    # psycopg quotes an array bound with %s as text, element by element (a tenth of
    # the worker's CPU per relayed token once); %b sends it as is.
    quoted: list[object] = []
    text_dump = ListDumper.dump

    def counting(self: ListDumper, obj: list[object]) -> object:
        quoted.append(obj)
        return text_dump(self, obj)

    layer = new_layer()
    channel = await layer.new_channel()
    await layer.group_add("session_bin", channel)
    assert await drain(layer, channel, wait=0.01) == []  # listening
    monkeypatch.setattr(ListDumper, "dump", counting)
    await layer.group_send_many([("session_bin", {"type": "run.event", "text": f"t{n}"}) for n in range(3)])
    assert [m["text"] for m in await drain(layer, channel)] == ["t0", "t1", "t2"]
    assert quoted == []


async def test_a_message_sent_before_the_listener_is_up_is_not_lost() -> None:
    layer = new_layer()
    channel = await layer.new_channel()
    await layer.group_add("session_y", channel)
    # Known to the layer as ours (a consumer registered it), but nobody listens yet.
    await layer._get_or_create_channel_advisory_lock(channel)
    await layer.group_send("session_y", {"type": "run.event", "text": "early"})
    assert [m["text"] for m in await drain(layer, channel)] == ["early"]


async def test_another_layers_start_does_not_steal_or_repeat_messages() -> None:
    first, second = new_layer(), new_layer()
    mine = await first.new_channel()
    await first.group_add("session_z", mine)
    receiving = asyncio.ensure_future(first.receive(mine))
    await asyncio.sleep(0.3)
    await first.group_send("session_z", {"type": "run.event", "n": 1})
    assert (await receiving)["n"] == 1
    # A second process starting its listener must not see or remove our messages.
    theirs = await second.new_channel()
    assert await drain(second, theirs, wait=0.3) == []
    assert await drain(first, mine, wait=0.3) == []


async def test_the_listener_reconnects_after_its_connection_is_killed() -> None:
    layer = new_layer()
    channel = await layer.new_channel()
    await layer.group_add("session_r", channel)
    receiving = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.3)
    pool = await layer.django_db.get_db_pool(layer.db_params)
    async with pool.connection() as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query ILIKE 'LISTEN%%' AND datname = current_database()"
        )
    await asyncio.sleep(1.0)  # the listener notices and reconnects
    await layer.group_send("session_r", {"type": "run.event", "n": 7})
    assert (await asyncio.wait_for(receiving, 10))["n"] == 7
    assert await drain(layer, channel, wait=0.3) == []


def test_the_default_layer_is_the_fixed_one() -> None:
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "claw_platform.channel_layer.PostgresChannelLayer"


async def test_a_bad_group_name_is_refused_every_time() -> None:
    layer = new_layer()
    await layer.group_send("session_ok", {"type": "run.event"})  # checked once, then remembered
    for _ in range(2):
        with pytest.raises(TypeError):
            await layer.group_send("not a valid name!", {"type": "run.event"})


async def test_a_statement_of_messages_is_notified_in_few_notifications(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One notification per message cost a PL/pgSQL call, a queued notification and a
    # parse per relayed token; a statement's messages now share them.
    layer = new_layer()
    channel = await layer.new_channel()
    await layer.group_add("session_few", channel)
    assert await drain(layer, channel, wait=0.01) == []  # listening
    payloads: list[str] = []
    deliver_all = layer._deliver_all

    def counting(payload: str) -> None:
        payloads.append(payload)
        deliver_all(payload)

    monkeypatch.setattr(layer, "_deliver_all", counting)
    fetched: list[int] = []
    fetch = layer.django_db.delete_message_returning_message

    async def counting_fetch(message_id: int) -> Any:
        fetched.append(message_id)
        return await fetch(message_id)

    monkeypatch.setattr(layer.django_db, "delete_message_returning_message", counting_fetch)
    small = [("session_few", {"type": "run.event", "n": n}) for n in range(200)]
    # A message whose base64 PostgreSQL breaks into lines, one that fills most of a
    # notification on its own, and one too big for any (read from its row).
    wrapped = ("session_few", {"type": "run.event", "n": 200, "text": "w" * 300})
    medium = ("session_few", {"type": "run.event", "n": 201, "text": "m" * 5000})
    big = ("session_few", {"type": "run.event", "n": 202, "text": "b" * 9000})
    await layer.group_send_many([*small, wrapped, medium, big])
    got = await drain(layer, channel)
    assert [m["n"] for m in got] == list(range(203))
    assert got[200]["text"] == "w" * 300
    assert got[201]["text"] == "m" * 5000
    assert got[202]["text"] == "b" * 9000
    assert len(fetched) == 1  # only the big one
    assert 3 <= len(payloads) <= 12
    assert all(len(p.encode()) < 8000 for p in payloads)
