"""A fake OpenAI-compatible embeddings server: ``POST /v1/embeddings`` over real HTTP.

It answers in OpenAI's wire format (``{"object": "list", "data": [{"object":
"embedding", "index": i, "embedding": [...]}], "model": ..., "usage": {"prompt_tokens":
n, "total_tokens": n}}``, the ``data`` items deliberately in reverse order so a client
must sort by ``index``). Vectors are deterministic bags of hashed words (unit length):
texts that share words are close, so recall through it is meaningful.

Faults: ``status`` (answer that HTTP status with an OpenAI error body), ``dimension``
(the size it returns, which may differ from what the profile says). ``requests``
keeps each request's headers and JSON body.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_WORD = re.compile(r"\w+")


def hashed_vector(text: str, dimension: int) -> list[float]:
    values = [0.0] * dimension
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        values[int.from_bytes(digest[:4], "big") % dimension] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


@dataclass
class FakeEmbeddings:
    dimension: int = 1536
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if self.status != 200:
            return web.json_response(
                {"error": {"message": "The server is overloaded.", "type": "server_error", "code": None}},
                status=self.status,
            )
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        tokens = sum(len(_WORD.findall(t)) + 1 for t in texts)
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_vector(t, self.dimension)}
            for i, t in enumerate(texts)
        ]
        return web.json_response(
            {
                "object": "list",
                "data": list(reversed(data)),
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    def start(self) -> FakeEmbeddings:
        loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            app = web.Application(client_max_size=16 * 1024 * 1024)
            app.router.add_post("/v1/embeddings", self._handle)
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            started.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="fake-embeddings", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None
