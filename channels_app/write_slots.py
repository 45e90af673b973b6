"""The web process's database writes for the chat sockets: few at a time, messages together.

Each writing action (a message, a stop, a decision) is a transaction run in a
database thread; :func:`write_slot` lets ``CLAW_SOCKET_WRITES`` of them run at once.
When two hundred people press Send together, six such threads at once took the GIL
from the event loop that relays every live token, and made each other's
transactions longer, without creating the runs any sooner.

Messages go through :func:`send_message`: a message that finds the slots busy waits
with the others, and the first of them to get a slot writes every message waiting
then in one statement (``agents.actions.message_batch``, group commit). With 200
messages at once, that is two or three statements instead of 200 transactions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings

from agents.actions.message_batch import MAX_BATCH, MessageRequest, do_send_messages
from agents.models import Run
from claw_platform.db import db_async
from claw_platform.loop_local import LoopLocal


def write_slot() -> asyncio.Semaphore:
    """A slot for one writing transaction of this event loop's sockets."""
    return _write_slots.get()


_write_slots = LoopLocal(lambda: asyncio.Semaphore(settings.CLAW_SOCKET_WRITES))


class _Waiting:
    """Messages waiting for a write slot (one list per event loop)."""

    def __init__(self) -> None:
        self.requests: list[tuple[MessageRequest, asyncio.Future[Run | None]]] = []


_waiting = LoopLocal(_Waiting)


async def send_message(request: MessageRequest) -> Run | None:
    """``do_send_message`` for ``request``, written with whatever other messages are
    waiting for a slot when one frees; raises what ``do_send_message`` would."""
    future: asyncio.Future[Run | None] = asyncio.get_running_loop().create_future()
    waiting = _waiting.get()
    waiting.requests.append((request, future))
    while not future.done():
        async with write_slot():
            if future.done() or not waiting.requests:
                break  # another message's transaction wrote this one, or is writing it
            batch = waiting.requests[:MAX_BATCH]
            del waiting.requests[:MAX_BATCH]
            # Shielded: this socket closing does not leave the batch's others waiting.
            await asyncio.shield(asyncio.ensure_future(_write(batch)))
    return await future


async def _write(batch: list[tuple[MessageRequest, asyncio.Future[Run | None]]]) -> None:
    try:
        results: list[Any] = await db_async(do_send_messages)([request for request, _ in batch])
    except Exception as exc:
        results = [exc] * len(batch)
    for (_, waiter), result in zip(batch, results, strict=True):
        if waiter.done():
            continue
        if isinstance(result, BaseException):
            waiter.set_exception(result)
        else:
            waiter.set_result(result)
