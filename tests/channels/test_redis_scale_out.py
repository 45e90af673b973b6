"""The scale-out configuration on the machine's Redis: channels_redis's pub/sub layer
(claw_platform.redis_layer) and django-q2's Redis broker, as ``CHANNEL_LAYER_URL`` / ``CLAW_Q_BROKER_URL`` build
them (claw_platform.config). Skipped where no Redis answers on 127.0.0.1:6379."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

from claw_platform import config

REDIS = "redis://127.0.0.1:6379/13"


def _redis_up() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


pytestmark = pytest.mark.skipif(not _redis_up(), reason="no Redis on 127.0.0.1:6379")


def redis_layer(**extra: Any) -> Any:
    from claw_platform.redis_layer import RedisChannelLayer

    cfg = config.channel_layer_config(REDIS, {})
    assert cfg["BACKEND"] == "claw_platform.redis_layer.RedisChannelLayer"
    return RedisChannelLayer(**{**cfg["CONFIG"], **extra})


def test_a_burst_to_one_group_reaches_every_member_in_order() -> None:
    """More messages than channels_redis keeps by default (100) and more sends at
    once than redis-py's default pool (100 connections): none is dropped."""

    async def scenario() -> list[list[int]]:
        layer = redis_layer()
        channels = [await layer.new_channel() for _ in range(3)]
        for channel in channels:
            await layer.group_add("burst", channel)
        for start in range(0, 300, 150):
            await asyncio.gather(
                *(layer.group_send("burst", {"type": "n", "n": n}) for n in range(start, start + 150))
            )
        await layer.group_send_many([("burst", {"type": "n", "n": n}) for n in range(300, 600)])
        got = []
        for channel in channels:
            got.append([(await asyncio.wait_for(layer.receive(channel), 10))["n"] for _ in range(600)])
        await layer.flush()
        return got

    for received in asyncio.run(scenario()):
        assert sorted(received[:300]) == list(range(300))
        assert received[300:] == list(range(300, 600))  # one pipeline keeps the order


def test_a_socket_joining_a_group_gets_what_is_published_right_after() -> None:
    """group_add returns once Redis has confirmed the subscription: a message another
    process publishes the moment after reaches the new member."""

    async def scenario() -> list[dict[str, Any]]:
        web, worker = redis_layer(), redis_layer()
        got = []
        for n in range(20):
            channel = await web.new_channel()
            await web.group_add(f"join-{n}", channel)
            await worker.group_send(f"join-{n}", {"type": "n", "n": n})
            got.append(await asyncio.wait_for(web.receive(channel), 5))
        await web.flush()
        await worker.flush()
        return got

    assert asyncio.run(scenario()) == [{"type": "n", "n": n} for n in range(20)]


def test_a_receive_that_timed_out_keeps_the_channel_subscribed() -> None:
    async def scenario() -> dict[str, Any]:
        layer = redis_layer()
        channel = await layer.new_channel()
        await layer.group_add("quiet", channel)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(channel), 0.05)
        await layer.group_send("quiet", {"type": "late"})
        try:
            return dict(await asyncio.wait_for(layer.receive(channel), 5))
        finally:
            await layer.flush()

    assert asyncio.run(scenario()) == {"type": "late"}


def test_a_channel_over_its_capacity_is_told_rather_than_silently_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A socket that stops reading: its backlog is dropped for one ``layer.gap``
    (the session socket then tells its client to resume from the stored events)."""

    async def scenario() -> list[Any]:
        layer = redis_layer(capacity=50)
        channel = await layer.new_channel()
        await layer.group_add("slow", channel)
        await layer.group_send_many([("slow", {"type": "n", "n": n}) for n in range(120)])
        await layer.group_send("slow", {"type": "n", "n": "last"})
        got = []
        while not got or got[-1] != "last":
            message = await asyncio.wait_for(layer.receive(channel), 5)
            got.append(message.get("n", message["type"]))
        await layer.flush()
        return got

    got = asyncio.run(scenario())
    # Whatever it held each time it was full went; what came after arrives in order.
    assert got[0] == "layer.gap"
    assert got[1:] == [*range(got[1], 120), "last"]
    assert len(got) <= 51
    assert "held 50 unread messages: dropped" in caplog.text


def test_a_subscription_that_reconnected_tells_its_channels_what_it_missed() -> None:
    """Redis closing the subscriber's connection (a restart, or the output buffer
    limit of a process reading too slowly): redis-py reconnects and subscribes again
    by itself, and what was published meanwhile is gone; each channel hears so."""
    import redis

    name = f"claw-test-{os.getpid()}"

    async def scenario() -> list[dict[str, Any]]:
        layer = redis_layer(hosts=[{"address": REDIS, "client_name": name}])
        channel = await layer.new_channel()
        await layer.group_add("kept", channel)
        admin = redis.Redis.from_url(REDIS)
        subscribers = [c["id"] for c in admin.client_list() if c.get("name") == name and c.get("sub") != "0"]
        assert subscribers
        for client_id in subscribers:
            admin.client_kill_filter(_id=client_id)
        got = [await asyncio.wait_for(layer.receive(channel), 10)]
        await layer.group_send("kept", {"type": "after"})
        got.append(await asyncio.wait_for(layer.receive(channel), 10))
        await layer.flush()
        return got

    assert asyncio.run(scenario()) == [{"type": "layer.gap"}, {"type": "after"}]


def test_the_redis_task_broker_round_trips_a_task() -> None:
    probe = (
        "import django; django.setup(); from django_q.brokers import get_broker; "
        "b = get_broker(); b.purge_queue(); b.enqueue('payload-1'); "
        "task = b.dequeue(); body = task[0][1] if task else b'none'; print(body.decode() if isinstance(body, bytes) else body); b.purge_queue()"
    )
    env = {
        **os.environ,
        "CLAW_Q_BROKER_URL": "redis://127.0.0.1:6379/12",
        "DJANGO_SETTINGS_MODULE": "claw_platform.settings",
    }
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "payload-1"


async def proxy_up_again(proxy: Any) -> None:
    """The proxy's port is free again once the cut connections have closed on both
    sides (the client's after its failed call): a moment later."""
    for _ in range(100):
        try:
            proxy.up()
            return
        except OSError:
            await asyncio.sleep(0.05)
    proxy.up()


def test_a_publish_that_failed_is_told_to_its_groups_with_the_next_one() -> None:
    """The worker's Redis connection goes down while it relays: those messages reach
    nobody, and the next publish that works tells their groups first."""
    import redis

    from tests.fakes.db_proxy import DatabaseProxy

    proxy = DatabaseProxy({"HOST": "127.0.0.1", "PORT": 6379}).start()

    async def scenario() -> list[dict[str, Any]]:
        web = redis_layer()
        worker = redis_layer(hosts=[{"address": f"redis://127.0.0.1:{proxy.port}/13"}])
        channel = await web.new_channel()
        await web.group_add("cut", channel)
        await worker.group_send("cut", {"type": "before"})
        proxy.down()
        with pytest.raises(redis.ConnectionError):
            await worker.group_send_many([("cut", {"type": "lost"})])
        await proxy_up_again(proxy)
        await worker.group_send("cut", {"type": "after"})
        got = [await asyncio.wait_for(web.receive(channel), 5) for _ in range(3)]
        await web.flush()
        await worker.flush()
        return got

    try:
        got = asyncio.run(scenario())
    finally:
        proxy.stop()
    assert got == [{"type": "before"}, {"type": "layer.gap"}, {"type": "after"}]
