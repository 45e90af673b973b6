"""Draft streaming: text and thinking deltas batched into live events.

With the PostgreSQL channel layer one event is one table write and one NOTIFY, so a
token per event would be a write per token. ZeroClaw's draft streaming batches to
about 80 characters; here a batch also goes out every ~40 ms so text never waits
behind a slow model (DESIGN "Live events").
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from agents.engine.interfaces import EventSink

DEFAULT_COALESCE_SECONDS = 0.04
DEFAULT_COALESCE_CHARS = 80
DEFAULT_CHECKPOINT_SECONDS = 1.0


class DeltaCoalescer:
    """Batches deltas into ``chunk`` / ``thinking`` events of ``{"text", "offset", "stream"}``.

    ``offset`` is how many characters of that kind this stream (one LLM call) sent
    before the batch, and ``stream`` names the call: a client that joins mid-stream
    from a checkpointed snapshot places each batch exactly, drops what it already
    has, sees a gap when one batch passed it by (then it asks for a newer snapshot),
    and tells a retried call (after a crash) from the one that died.

    A batch is sent when it reaches ``chars`` characters, when a delta arrives
    ``seconds`` after the last send, or when a timer fires ``seconds`` after the
    first held delta -- so a pause in the stream never holds text back. Switching
    between text and thinking sends the held batch first. A lock keeps timer sends
    and inline sends in order. Every ``checkpoint_seconds`` the visible text so far
    is handed to ``checkpoint`` (the run's partial-text checkpoint).
    """

    __slots__ = (
        "_buf",
        "_kind",
        "_len",
        "_lock",
        "_sent",
        "_timer",
        "_timer_task",
        "chars",
        "checkpoint",
        "checkpoint_seconds",
        "last_checkpoint",
        "last_flush",
        "seconds",
        "sink",
        "stream",
        "text",
    )

    def __init__(
        self,
        sink: EventSink,
        *,
        chars: int = DEFAULT_COALESCE_CHARS,
        seconds: float = DEFAULT_COALESCE_SECONDS,
        checkpoint: Callable[[str], Awaitable[None]] | None = None,
        checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    ) -> None:
        self.sink = sink
        self.chars = chars
        self.seconds = seconds
        self.checkpoint = checkpoint
        self.checkpoint_seconds = checkpoint_seconds
        self._buf: list[str] = []
        self._len = 0
        self._kind = "chunk"
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_task: asyncio.Future[None] | None = None
        self.last_flush = time.monotonic()
        self.last_checkpoint = self.last_flush
        self.text: list[str] = []  # visible text sent so far
        self._sent = {"chunk": 0, "thinking": 0}  # characters sent, per kind
        self.stream = uuid.uuid4().hex[:12]

    async def add(self, kind: str, text: str) -> None:
        """Take one delta; ``kind`` is ``chunk`` (visible text) or ``thinking``."""
        if not text:
            return
        if self.seconds <= 0 and not self._buf:
            # Every delta goes out at once (the sink batches by itself): no timer can
            # be pending, so no lock is needed to keep sends in order.
            await self._send(kind, text, time.monotonic())
            return
        if self._buf and kind != self._kind:
            await self.flush()
        self._kind = kind
        self._buf.append(text)
        self._len += len(text)
        if self._len >= self.chars or time.monotonic() - self.last_flush >= self.seconds:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.seconds, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._buf:
            self._timer_task = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Send whatever is held now (called at the end of every stream)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        async with self._lock:
            if not self._buf:
                return
            text = "".join(self._buf)
            self._buf = []
            self._len = 0
            await self._send(self._kind, text, time.monotonic())

    async def _send(self, kind: str, text: str, now: float) -> None:
        self.last_flush = now
        offset = self._sent[kind]
        self._sent[kind] = offset + len(text)
        await self.sink.emit(kind, {"text": text, "offset": offset, "stream": self.stream})
        if kind == "chunk":
            self.text.append(text)
            if self.checkpoint and now - self.last_checkpoint >= self.checkpoint_seconds:
                self.last_checkpoint = now
                await self.checkpoint("".join(self.text))
