"""LiveJsonConsumer (channels_app.live_consumer): when the socket's handler and the
layer's handler fail in the same turn of the loop, the first error ends the consumer
and the second is logged, not lost."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from channels_app import live_consumer
from channels_app.live_consumer import LiveJsonConsumer


class FailingConsumer(LiveJsonConsumer):
    async def websocket_receive(self, message: dict[str, Any]) -> None:
        raise ValueError("from the socket")

    async def run_event(self, message: dict[str, Any]) -> None:
        raise ValueError("from the layer")


class OneMessageLayer:
    def __init__(self) -> None:
        self.released: list[str] = []

    async def new_channel(self) -> str:
        return "specific.test!one"

    async def receive(self, channel: str) -> dict[str, Any]:
        return {"type": "run.event"}

    def release_channel(self, channel: str) -> None:
        self.released.append(channel)


async def test_both_handlers_errors_are_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    layer = OneMessageLayer()
    monkeypatch.setattr(live_consumer, "get_channel_layer", lambda alias: layer)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.receive", "text": "{}"}

    async def send(message: dict[str, Any]) -> None:
        return None

    with (
        caplog.at_level(logging.ERROR, logger="channels_app.live_consumer"),
        pytest.raises(ValueError) as raised,
    ):
        await FailingConsumer()({"type": "websocket"}, receive, send)
    logged = [record.exc_info[1] for record in caplog.records if record.exc_info]
    assert {str(raised.value), *(str(e) for e in logged)} == {"from the socket", "from the layer"}
    assert layer.released == ["specific.test!one"]
