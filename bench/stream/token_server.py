"""An OpenAI-compatible streaming endpoint whose tokens carry the time they were
written, for ``bench/stream/run.py``: each content delta is ``<microseconds>`` (the
wall clock when the server wrote it), so a WebSocket client on the same machine can
tell how long each token took to reach it.

    python bench/stream/token_server.py --port 8765 --tokens 200 --interval 0.025
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time

from aiohttp import web

# One content delta as an OpenAI-compatible event, split where its token goes.
CHUNK_HEAD, CHUNK_TAIL = (
    f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'content': '@'}}]})}\n\n".encode().split(b"@")
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.025, help="seconds between tokens")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if not body.get("stream"):
            raise web.HTTPBadRequest(text="streaming only")
        # A message the benchmark sends one at a time while the streams run ("probe")
        # gets a short answer: it measures the queue wait, not more load.
        last = (body.get("messages") or [{}])[-1].get("content")
        tokens = 2 if "probe" in str(last) else args.tokens
        for _ in range(tokens):
            await asyncio.sleep(args.interval)
            # The event's JSON around the stamp is built once (this server shares the
            # cores it helps to measure).
            await response.write(b"%s<%d>%s" % (CHUNK_HEAD, time.time_ns() // 1000, CHUNK_TAIL))
        final = {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": tokens},
        }
        await response.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/v1/models", models)
    # Out of the collector's sight: a full collection here stalled every stream for
    # 60 ms, which reached the product as a burst of 200 tokens at once.
    gc.collect()
    gc.freeze()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
