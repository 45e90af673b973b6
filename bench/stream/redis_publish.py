#!/usr/bin/env python
"""The sending side of the Redis channel layer: CPU per relayed message, before and after.

    .venv/bin/python bench/stream/redis_publish.py [--groups 200] [--batches 50] [--rounds 3]

A worker's relay pump hands the layer one batch at a time: a message for each
streaming run's session group (``channels_app.relay``). Here, on the machine's Redis
(127.0.0.1:6379), ``--batches`` such batches of ``--groups`` messages each are sent
through:

1. ``channels_redis core``: channels_redis's ``RedisChannelLayer``, which
   ``CHANNEL_LAYER_URL=redis://`` used before (each group message: the group's
   members read, then a Lua script that pushes to each member's list), one
   ``group_send`` per message, the groups side by side (``relay.group_send_many``
   for a layer without it); every group has one member, as a socket would;
2. ``channels_redis pubsub``: the library's ``RedisPubSubChannelLayer``, one
   ``group_send`` (a PUBLISH round trip) per message the same way;
3. ``claw pubsub, pipelined``: ``claw_platform.redis_layer.RedisChannelLayer``'s
   ``group_send_many``: the batch's PUBLISHes in one pipeline.

Printed per layer: this process's CPU (user + system) per message and the wall time
per batch, the lowest of ``--rounds`` rounds (the machine's other work only adds).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

REDIS = "redis://127.0.0.1:6379/11"
HOST = {"address": REDIS, "max_connections": 1000, "socket_timeout": 30}


async def send_each(layer: Any, messages: list[tuple[str, dict[str, Any]]]) -> None:
    from channels_app.relay import group_send_many

    await group_send_many(layer, messages)


async def measure(name: str, layer: Any, groups: list[str], args: argparse.Namespace) -> tuple[float, float]:
    if name == "channels_redis core":
        for group in groups:  # one member each, as a session's socket
            await layer.group_add(group, await layer.new_channel())
    frame = '{"type":"chunk","run":1,"seq":3,"payload":{"text":"a few tokens of text","offset":120}}'
    best_cpu, best_wall = float("inf"), float("inf")
    for _ in range(args.rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        for n in range(args.batches):
            batch = [(group, {"type": "run.event", "text": frame, "n": n}) for group in groups]
            if name == "claw pubsub, pipelined":
                await layer.group_send_many(batch)
            else:
                await send_each(layer, batch)
        messages = args.batches * len(groups)
        best_cpu = min(best_cpu, (time.process_time() - cpu) / messages * 1e6)
        best_wall = min(best_wall, (time.perf_counter() - wall) / args.batches * 1e3)
        if name == "channels_redis core":
            await layer.flush()  # the members' lists would reach their capacity
            for group in groups:
                await layer.group_add(group, await layer.new_channel())
    await layer.flush()
    return best_cpu, best_wall


async def main(args: argparse.Namespace) -> None:
    from channels_redis.core import RedisChannelLayer as CoreLayer
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from claw_platform.redis_layer import RedisChannelLayer

    groups = [f"session_bench-{os.getpid()}-{n}" for n in range(args.groups)]
    layers = {
        "channels_redis core": CoreLayer(hosts=[HOST], capacity=1000),
        "channels_redis pubsub": RedisPubSubChannelLayer(hosts=[HOST]),
        "claw pubsub, pipelined": RedisChannelLayer(hosts=[HOST]),
    }
    print(f"{args.batches} batches of {args.groups} group messages, best of {args.rounds} rounds")
    for name, layer in layers.items():
        cpu, wall = await measure(name, layer, groups, args)
        print(f"  {name:24s} {cpu:7.1f} µs CPU per message   {wall:8.1f} ms per batch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/unused")  # never connected
    asyncio.run(main(parser.parse_args()))
