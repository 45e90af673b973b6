"""The scale-out configuration on the machine's Redis: channels_redis as the layer
and django-q2's Redis broker, as ``CHANNEL_LAYER_URL`` / ``CLAW_Q_BROKER_URL`` build
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


def redis_layer() -> Any:
    from channels_redis.core import RedisChannelLayer

    cfg = config.channel_layer_config(REDIS, {})
    assert cfg["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    return RedisChannelLayer(**cfg["CONFIG"])


def test_a_receive_outlasts_the_layers_blocking_pop() -> None:
    """channels_redis blocks 5 s in BZPOPMIN per receive; redis-py 8 timed the read
    out at 5 s too, and a quiet socket's consumer died of "Timeout reading"."""

    async def scenario() -> dict[str, Any]:
        layer = redis_layer()
        channel = await layer.new_channel()

        async def send_later() -> None:
            await asyncio.sleep(6)
            await layer.send(channel, {"type": "late", "n": 1})

        sender = asyncio.ensure_future(send_later())
        try:
            return dict(await asyncio.wait_for(layer.receive(channel), 30))
        finally:
            await sender
            await layer.flush()

    assert asyncio.run(scenario()) == {"type": "late", "n": 1}


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
        got = []
        for channel in channels:
            got.append([(await asyncio.wait_for(layer.receive(channel), 10))["n"] for _ in range(300)])
        await layer.flush()
        return got

    for received in asyncio.run(scenario()):
        assert sorted(received) == list(range(300))


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
