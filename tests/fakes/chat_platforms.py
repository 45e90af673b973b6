"""Local fakes of chat platforms' APIs, real HTTP servers speaking their wire formats:

- :class:`FakeTelegram`: the Bot API (``POST /bot<token>/<method>``, JSON or
  multipart), answering ``{"ok": true, "result": …}`` or Telegram's error shape
  (``{"ok": false, "error_code", "description", "parameters": {"retry_after"}}``),
  with ``getUpdates`` long polling over a queue of updates;
- :class:`FakeSlack`: the Web API (``POST /api/<method>`` with a bearer token),
  answering ``{"ok": true, "ts": …}`` or ``{"ok": false, "error": …}`` and HTTP 429
  with ``Retry-After``;
- :class:`FakeCallback`: a generic webhook receiver that records signed POSTs.

``fail(method, status, times, retry_after)`` makes the next calls of a method fail.
Every request is recorded in ``calls`` as ``(method, body)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import threading
import time
from collections import deque
from typing import Any

from aiohttp import BodyPartReader, web


class FakePlatform:
    name = "platform"
    max_body_bytes = 1024 * 1024  # aiohttp's default cap on a request body

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, deque[tuple[int, float | None]]] = {}
        self.ids = itertools.count(100)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.lock = threading.Lock()
        self.closing = False  # WebSocket sessions end when set; stop() waits for them
        self.open_sockets = 0

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def tracked(self, request: web.Request, session: Any) -> web.WebSocketResponse:
        """A WebSocket whose ``session(request, ws)`` is counted, so :meth:`stop`
        lets it end (and the client see a close) before the server goes."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        with self.lock:
            self.open_sockets += 1
        try:
            await session(request, ws)
        finally:
            with self.lock:
                self.open_sockets -= 1
            await ws.close()
        return ws

    def fail(self, method: str, status: int, *, times: int = 1, retry_after: float | None = None) -> None:
        with self.lock:
            queue = self.failures.setdefault(method, deque())
            for _ in range(times):
                queue.append((status, retry_after))

    def take_failure(self, method: str) -> tuple[int, float | None] | None:
        with self.lock:
            queue = self.failures.get(method)
            return queue.popleft() if queue else None

    def record(self, method: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.calls.append((method, body))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for name, body in self.calls if name == method]

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        """Wait until ``predicate(self)`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate(self)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: condition not met in {timeout}s; calls: {self.calls}")

    def start(self) -> FakePlatform:
        loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            app = web.Application(client_max_size=self.max_body_bytes)
            self.routes(app)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.url = f"http://127.0.0.1:{port}"

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            started.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"fake-{self.name}", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        self.closing = True
        deadline = time.monotonic() + 2.0
        while self.open_sockets and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


class FakeTelegram(FakePlatform):
    name = "telegram"

    def __init__(self, token: str = "123:abc") -> None:
        super().__init__()
        self.token = token
        self.updates: deque[dict[str, Any]] = deque()
        self.hosted: dict[str, tuple[str, bytes, int]] = {}
        self.files_open = threading.Event()
        self.files_open.set()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/bot{token}/{method}", self.handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self.file)

    def host_file(self, content: bytes, *, file_path: str, file_size: int | None = None) -> dict[str, Any]:
        """Keep a file for ``getFile``; its ``file_id``/``file_unique_id``/``file_size``
        (as a ``PhotoSize`` or ``Document`` carries them; ``file_size`` as declared)."""
        file_id = f"AgAC{next(self.ids)}"
        declared = len(content) if file_size is None else file_size
        with self.lock:
            self.hosted[file_id] = (file_path, content, declared)
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": declared}

    async def file(self, request: web.Request) -> web.Response:
        """``GET /file/bot<token>/<file_path>``: the bytes (held while ``files_open``
        is clear, so a test can see what happens before a download ends)."""
        if not self.files_open.is_set():
            await asyncio.to_thread(self.files_open.wait, 30)
        self.record("file", {"path": request.match_info["path"]})
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        with self.lock:
            found = [c for p, c, _ in self.hosted.values() if p == request.match_info["path"]]
        if not found:
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        return web.Response(body=found[0], content_type="application/octet-stream")

    def get_file(self, body: dict[str, Any]) -> web.Response:
        """``getFile``: the file's path, or Bot API's refusal of one over 20 MB."""
        with self.lock:
            hosted = self.hosted.get(str(body.get("file_id")))
        if hosted is None:
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: invalid file_id"}, status=400
            )
        path, _content, declared = hosted
        if declared > 20 * 1024 * 1024:
            return web.json_response(
                {"ok": False, "error_code": 400, "description": "Bad Request: file is too big"}, status=400
            )
        result = {"file_id": body["file_id"], "file_unique_id": f"u{body['file_id']}"}
        return web.json_response({"ok": True, "result": {**result, "file_size": declared, "file_path": path}})

    def messages(self) -> list[dict[str, Any]]:
        """The chat as the user sees it: message id -> latest text, in send order."""
        shown: dict[int, dict[str, Any]] = {}
        for method, body in list(self.calls):
            if method == "sendMessage":
                shown[body["_message_id"]] = dict(body)
            elif method == "editMessageText" and body.get("message_id") in shown:
                shown[body["message_id"]]["text"] = body["text"]
        return list(shown.values())

    async def handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            body: dict[str, Any] = {
                k: (v if isinstance(v, str) else f"<file {v.filename}>") for k, v in form.items()
            }
        else:
            body = await request.json()
        failure = self.take_failure(method)
        if failure is not None:
            status, retry_after = failure
            self.record(f"!{method}", body)
            error: dict[str, Any] = {"ok": False, "error_code": status, "description": f"Error {status}"}
            if retry_after is not None:
                error["parameters"] = {"retry_after": retry_after}
            return web.json_response(error, status=status)
        if method == "getUpdates":
            offset = int(body.get("offset", 0))
            deadline = time.monotonic() + min(float(body.get("timeout", 0)), 2.0)
            while True:
                with self.lock:
                    ready = [u for u in self.updates if u["update_id"] >= offset]
                if ready or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.05)
            self.record(method, body)
            return web.json_response({"ok": True, "result": ready})
        if method in ("sendMessage", "sendDocument"):
            message_id = next(self.ids)
            body["_message_id"] = message_id
            self.record(method, body)
            chat = {
                "id": int(body["chat_id"]) if str(body["chat_id"]).lstrip("-").isdigit() else body["chat_id"]
            }
            return web.json_response(
                {"ok": True, "result": {"message_id": message_id, "chat": chat, "text": body.get("text", "")}}
            )
        if method == "editMessageText":
            self.record(method, body)
            return web.json_response({"ok": True, "result": {"message_id": body["message_id"]}})
        if method == "getFile":
            self.record(method, body)
            return self.get_file(body)
        self.record(method, body)
        return web.json_response({"ok": True, "result": True})


class FakeSlack(FakePlatform):
    """Also Socket Mode: ``apps.connections.open`` (the app-level token) answers a
    WebSocket URL; the socket says ``hello``, sends the envelopes of
    :meth:`push_envelope` (``{"envelope_id", "type", "payload",
    "accepts_response_payload", "retry_attempt", "retry_reason"}``) and records the
    acknowledgements (``{"envelope_id"}``) in ``acks``; an envelope not acknowledged
    within ``redeliver_after`` seconds is sent again, as Slack does."""

    name = "slack"

    def __init__(self, token: str = "xoxb-test", app_token: str = "xapp-test") -> None:
        super().__init__()
        self.token = token
        self.app_token = app_token
        self.envelopes: deque[dict[str, Any]] = deque()
        self.acks: list[str] = []
        self.sockets_opened = 0
        self.redeliver_after = 1.0
        self.hosted: dict[str, bytes] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/apps.connections.open", self.connections_open)
        app.router.add_post("/api/{method}", self.handle)
        app.router.add_get("/link/", self.socket)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self.file)

    def host_file(
        self, name: str, content: bytes, *, mimetype: str = "", size: int | None = None
    ) -> dict[str, Any]:
        """Keep a file on the fake file host; the file object a ``message`` event's
        ``files`` carries for it (``size`` as declared: the real one unless told)."""
        file_id = f"F{next(self.ids)}"
        with self.lock:
            self.hosted[file_id] = content
        base = f"{self.url}/files-pri/T0001-{file_id}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype or "application/octet-stream",
            "filetype": name.rsplit(".", 1)[-1],
            "size": len(content) if size is None else size,
            "mode": "hosted",
            "is_external": False,
            "url_private": f"{base}/{name}",
            "url_private_download": f"{base}/download/{name}",
        }

    async def file(self, request: web.Request) -> web.Response:
        """``url_private_download``: the bytes with the bot token as a bearer; without
        it, Slack's redirect to the sign-in page."""
        authorization = request.headers.get("Authorization", "")
        self.record("file", {"path": request.path, "authorization": authorization})
        if authorization != f"Bearer {self.token}":
            raise web.HTTPFound(f"{self.url}/?redir=%2Ffiles-pri")
        file_id = request.match_info["team_file"].split("-", 1)[-1]
        with self.lock:
            content = self.hosted.get(file_id)
        if content is None:
            return web.Response(status=404, text="file_not_found")
        return web.Response(body=content, content_type="application/octet-stream")

    def push_envelope(self, kind: str, payload: dict[str, Any]) -> str:
        envelope_id = f"env-{next(self.ids)}"
        with self.lock:
            self.envelopes.append(
                {
                    "envelope_id": envelope_id,
                    "type": kind,
                    "payload": payload,
                    "accepts_response_payload": kind != "events_api",
                    "retry_attempt": 0,
                    "retry_reason": "",
                }
            )
        return envelope_id

    async def connections_open(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.app_token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        ws_url = self.url.replace("http://", "ws://") + "/link/?ticket=fake-ticket&app_id=A1"
        return web.json_response({"ok": True, "url": ws_url})

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        return await self.tracked(request, self._socket_session)

    async def _socket_session(self, request: web.Request, ws: web.WebSocketResponse) -> web.WebSocketResponse:
        with self.lock:
            self.sockets_opened += 1
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A1"}}
        await ws.send_json(hello)
        unacked: dict[str, tuple[float, dict[str, Any]]] = {}
        while not ws.closed and not self.closing:
            with self.lock:
                pending = list(self.envelopes)
                self.envelopes.clear()
                acked = set(self.acks)
            now = time.monotonic()
            for envelope_id, (sent_at, envelope) in list(unacked.items()):
                if envelope_id in acked:
                    del unacked[envelope_id]
                elif now - sent_at > self.redeliver_after:
                    envelope["retry_attempt"] += 1
                    envelope["retry_reason"] = "timeout"
                    pending.append(envelope)
            for envelope in pending:
                unacked[envelope["envelope_id"]] = (now, envelope)
                await ws.send_json(envelope)
            try:
                frame = await ws.receive(timeout=0.05)
            except TimeoutError:
                continue
            if frame.type == web.WSMsgType.PING:
                await ws.pong(frame.data)
                continue
            if frame.type != web.WSMsgType.TEXT:
                break
            data = json.loads(frame.data)
            with self.lock:
                if isinstance(data, dict) and data.get("envelope_id"):
                    self.acks.append(str(data["envelope_id"]))
        return ws

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    def messages(self) -> list[dict[str, Any]]:
        shown: dict[str, dict[str, Any]] = {}
        for method, body in list(self.calls):
            if method == "chat.postMessage":
                shown[body["_ts"]] = dict(body)
            elif method == "chat.update" and body.get("ts") in shown:
                shown[body["ts"]]["text"] = body["text"]
        return list(shown.values())

    def _history(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        """``conversations.history`` (or ``.replies`` of the thread ``ts``): the bot's
        messages newest first, metadata only with ``include_all_metadata``."""
        found = []
        for method, body in list(self.calls):
            if method != "chat.postMessage" or body["channel"] != query.get("channel"):
                continue
            if "ts" in query and body.get("thread_ts") != query["ts"]:
                continue
            if float(body["_ts"]) < float(query.get("oldest") or 0):
                continue
            message = {"type": "message", "ts": body["_ts"], "text": body.get("text", ""), "bot_id": "B1"}
            if query.get("include_all_metadata") == "true" and body.get("metadata"):
                message["metadata"] = body["metadata"]
            found.append(message)
        return found[::-1]

    async def handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if request.content_type == "application/x-www-form-urlencoded":
            body = dict(await request.post())  # the read methods take form arguments
        else:
            body = await request.json()
        failure = self.take_failure(method)
        if failure is not None:
            status, retry_after = failure
            self.record(f"!{method}", body)
            headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
            if status == 403:
                return web.json_response(
                    {"ok": False, "error": "missing_scope", "needed": "channels:history"}
                )
            if status == 200:
                return web.json_response({"ok": False, "error": "channel_not_found"})
            return web.json_response({"ok": False, "error": "ratelimited"}, status=status, headers=headers)
        if method == "chat.postMessage":
            ts = f"{int(time.time())}.{next(self.ids):06d}"
            body["_ts"] = ts
            self.record(method, body)
            return web.json_response({"ok": True, "channel": body["channel"], "ts": ts})
        if method in ("conversations.history", "conversations.replies"):
            self.record(method, body)
            return web.json_response({"ok": True, "messages": self._history(body), "has_more": False})
        self.record(method, body)
        return web.json_response({"ok": True, "channel": body.get("channel"), "ts": body.get("ts")})


class FakeCallback(FakePlatform):
    """A generic webhook channel's callback receiver: records each signed POST with
    its headers as ``(type, body)``."""

    name = "callback"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/hook", self.handle)

    @property
    def hook_url(self) -> str:
        return f"{self.url}/hook"

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw)
        body["_headers"] = {k.lower(): v for k, v in request.headers.items()}
        body["_raw"] = raw.decode()
        failure = self.take_failure("callback")
        if failure is not None:
            self.record("!callback", body)
            return web.json_response({"error": "busy"}, status=failure[0])
        self.record(str(body.get("type")), body)
        return web.json_response({"message_id": body.get("message_id")})


@contextlib.contextmanager
def _invalid_form(detail: str) -> web.Response:
    return web.json_response(
        {"code": 50035, "message": "Invalid Form Body", "errors": {"_": detail}}, status=400
    )


def running(fake: FakePlatform) -> Any:
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


class FakeWhatsApp(FakePlatform):
    """The WhatsApp Cloud API: ``POST /<phone number id>/messages`` with a bearer
    token, answering ``{"messaging_product", "contacts", "messages": [{"id"}]}`` or
    Graph's ``{"error": {"message", "type", "code"}}``."""

    name = "whatsapp"

    def __init__(self, token: str = "wa-token", phone_id: str = "1555000") -> None:
        super().__init__()
        self.token = token
        self.phone_id = phone_id
        self.media_objects: dict[str, tuple[bytes, str, int, str]] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{phone_id}/messages", self.handle)
        app.router.add_get("/whatsapp_business/attachments/", self.download)
        app.router.add_get("/{media_id}", self.media)

    def host_media(
        self, content: bytes, mime_type: str, *, file_size: int | None = None, sha256: str | None = None
    ) -> str:
        """Keep a media object; its id, as an ``image`` / ``document`` message carries it."""
        media_id = str(next(self.ids) + 700_000_000_000)
        declared = len(content) if file_size is None else file_size
        digest = hashlib.sha256(content).hexdigest() if sha256 is None else sha256
        with self.lock:
            self.media_objects[media_id] = (content, mime_type, declared, digest)
        return media_id

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def media(self, request: web.Request) -> web.Response:
        """``GET /<media id>``: the media object (a URL valid for five minutes)."""
        media_id = request.match_info["media_id"]
        self.record("media", {"id": media_id})
        if not self._authorized(request):
            return web.json_response(
                {"error": {"message": "Invalid OAuth access token", "code": 190}}, status=401
            )
        with self.lock:
            found = self.media_objects.get(media_id)
        if found is None:
            return web.json_response(
                {
                    "error": {
                        "message": "Unsupported get request.",
                        "type": "GraphMethodException",
                        "code": 100,
                    }
                },
                status=400,
            )
        _content, mime_type, declared, digest = found
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "url": f"{self.url}/whatsapp_business/attachments/?mid={media_id}&ext=1700000300&hash=ATu",
                "mime_type": mime_type,
                "sha256": digest,
                "file_size": str(declared),
                "id": media_id,
            }
        )

    async def download(self, request: web.Request) -> web.Response:
        """The media URL: the bytes, with the token as a bearer (401 without)."""
        media_id = request.query.get("mid", "")
        self.record("download", {"id": media_id, "authorization": request.headers.get("Authorization", "")})
        if not self._authorized(request):
            return web.Response(status=401)
        with self.lock:
            found = self.media_objects.get(media_id)
        if found is None:
            return web.Response(status=404)
        return web.Response(body=found[0], content_type=found[1])

    async def handle(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}" or (
            request.match_info["phone_id"] != self.phone_id
        ):
            return web.json_response(
                {"error": {"message": "Invalid OAuth access token", "code": 190}}, status=401
            )
        body = await request.json()
        failure = self.take_failure("messages")
        if failure is not None:
            status, retry_after = failure
            self.record("!messages", body)
            headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else {}
            return web.json_response(
                {"error": {"message": f"error {status}", "type": "OAuthException", "code": 130429}},
                status=status,
                headers=headers,
            )
        message_id = f"wamid.{next(self.ids)}"
        self.record("messages", body)
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"wa_id": body["to"]}],
                "messages": [{"id": message_id}],
            }
        )


class FakeDiscord(FakePlatform):
    """Discord's REST API v10 (``/api/v10/channels/<id>/messages`` …, ``Authorization:
    Bot <token>``; message objects back; 429 as ``{"message", "retry_after",
    "global"}`` with ``Retry-After``; a content over 2,000 characters refused as
    ``Invalid Form Body``) and its Gateway (``GET /api/v10/gateway/bot`` → a
    WebSocket speaking HELLO / IDENTIFY / READY / heartbeats, then ``MESSAGE_CREATE``
    dispatches from :meth:`push_message`)."""

    name = "discord"
    max_body_bytes = 25 * 1024 * 1024

    def __init__(self, token: str = "discord-token", bot_id: str = "9000") -> None:
        super().__init__()
        self.token = token
        self.bot_id = bot_id
        self.ids = itertools.count(1_100_000_000_000_000_000)
        self.dispatches: deque[dict[str, Any]] = deque()
        self.nonces: dict[str, dict[str, Any]] = {}
        self.heartbeat_interval_ms = 500
        self.gateway_frames: list[dict[str, Any]] = []
        self.files: dict[str, tuple[bytes, str]] = {}
        self.delays: dict[str, float] = {}

    def host_file(
        self,
        filename: str,
        content: bytes,
        *,
        content_type: str = "",
        declared_size: int | None = None,
        delay: float = 0.0,
    ) -> dict[str, Any]:
        """Put a file on the fake CDN (answered after ``delay`` seconds); the
        attachment object a ``MESSAGE_CREATE`` carries for it (``size`` as declared:
        the real one unless told otherwise)."""
        attachment_id = str(next(self.ids))
        with self.lock:
            self.files[attachment_id] = (content, content_type)
            if delay:
                self.delays[attachment_id] = delay
        url = f"{self.url}/attachments/555/{attachment_id}/{filename}?ex=6745&is=6744&hm=ab12"
        item: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(content) if declared_size is None else declared_size,
            "url": url,
            "proxy_url": url.replace("/attachments/", "/media/"),
        }
        if content_type:
            item["content_type"] = content_type
        return item

    async def cdn(self, request: web.Request) -> web.StreamResponse:
        attachment_id = request.match_info["attachment"]
        self.record("cdn", {"id": attachment_id, "authorization": request.headers.get("Authorization", "")})
        with self.lock:
            hosted = self.files.get(attachment_id)
        if hosted is None or request.query.get("hm") != "ab12":
            return web.Response(status=404, text="Not Found")
        content, content_type = hosted
        await asyncio.sleep(self.delays.get(attachment_id, 0.0))
        return web.Response(body=content, content_type=content_type or "application/octet-stream")

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        """A JSON body, or a ``multipart/form-data`` one as Discord reads it: the
        message in ``payload_json``, files as ``files[n]`` (kept under ``_files``),
        each ``attachments[].id`` naming one of them."""
        if request.content_type != "multipart/form-data":
            body: dict[str, Any] = await request.json()
            return body
        body, files = {}, []
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader):
                return _invalid_form("nested multipart")
            if part.name == "payload_json":
                body = json.loads(await part.text())
            elif part.name and part.name.startswith("files[") and part.name.endswith("]"):
                files.append(
                    {
                        "field": part.name,
                        "filename": part.filename,
                        "content_type": part.headers.get("Content-Type", ""),
                        "content": bytes(await part.read()),
                    }
                )
            else:
                return _invalid_form(f"unknown field {part.name}")
        fields = {f["field"] for f in files}
        for item in body.get("attachments") or []:
            if f"files[{item.get('id')}]" not in fields:
                return _invalid_form(f"attachments[{item.get('id')}] names no uploaded file")
        body["_files"] = files
        return body

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v10"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/v10/channels/{channel}/messages", self.create_message)
        app.router.add_patch("/api/v10/channels/{channel}/messages/{message}", self.edit_message)
        app.router.add_post("/api/v10/channels/{channel}/typing", self.typing)
        app.router.add_post("/api/v10/webhooks/{application}/{token}", self.followup)
        app.router.add_get("/api/v10/gateway/bot", self.gateway_bot)
        app.router.add_get("/gateway/", self.gateway)
        app.router.add_get("/attachments/{channel}/{attachment}/{filename}", self.cdn)

    def messages(self) -> list[dict[str, Any]]:
        """The channel as users see it: message id -> latest content, in send order."""
        shown: dict[str, dict[str, Any]] = {}
        for method, body in list(self.calls):
            if method == "create_message":
                shown[body["_id"]] = dict(body)
            elif method == "edit_message" and body.get("_id") in shown:
                shown[body["_id"]]["content"] = body["content"]
        return list(shown.values())

    def push_message(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.dispatches.append({"t": "MESSAGE_CREATE", "d": data})

    def _refusal(self, request: web.Request, method: str, body: dict[str, Any]) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return web.json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        failure = self.take_failure(method)
        if failure is not None:
            status, retry_after = failure
            self.record(f"!{method}", body)
            if status == 429:
                wait = retry_after if retry_after is not None else 0.2
                return web.json_response(
                    {"message": "You are being rate limited.", "retry_after": wait, "global": False},
                    status=429,
                    headers={"Retry-After": str(wait), "X-RateLimit-Scope": "user"},
                )
            return web.json_response({"message": f"{status}: error", "code": 0}, status=status)
        if len(str(body.get("content", ""))) > 2000:
            self.record(f"!{method}", body)
            error = {
                "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
            }
            return web.json_response(
                {"code": 50035, "errors": {"content": error}, "message": "Invalid Form Body"}, status=400
            )
        return None

    def _message(self, message_id: str, channel: str, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": message_id,
            "type": 0,
            "channel_id": channel,
            "content": body.get("content", ""),
            "author": {"id": self.bot_id, "username": "claw", "bot": True},
            "components": body.get("components", []),
            "timestamp": "2026-11-26T00:00:00.000000+00:00",
        }

    async def create_message(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        refused = self._refusal(request, "create_message", body)
        if refused is not None:
            return refused
        nonce = str(body.get("nonce") or "")
        if nonce and body.get("enforce_nonce"):
            # Discord: a nonce seen before answers the message it made, not a new one.
            with self.lock:
                earlier = self.nonces.get(nonce)
            if earlier is not None:
                self.record("nonce_hit", {"nonce": nonce, "_id": earlier["_id"]})
                return web.json_response(self._message(earlier["_id"], earlier["_channel"], earlier))
        message_id = str(next(self.ids))
        body["_id"] = message_id
        body["_channel"] = request.match_info["channel"]
        self.record("create_message", body)
        if nonce:
            with self.lock:
                self.nonces[nonce] = body
        message = self._message(message_id, request.match_info["channel"], body)
        message["attachments"] = [
            {
                "id": str(next(self.ids)),
                "filename": f["filename"],
                "size": len(f["content"]),
                "content_type": f["content_type"],
                "url": f"{self.url}/attachments/{body['_channel']}/{message_id}/{f['filename']}",
            }
            for f in body.get("_files", [])
        ]
        return web.json_response(message)

    async def edit_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        refused = self._refusal(request, "edit_message", body)
        if refused is not None:
            return refused
        body["_id"] = request.match_info["message"]
        self.record("edit_message", body)
        return web.json_response(self._message(body["_id"], request.match_info["channel"], body))

    async def typing(self, request: web.Request) -> web.Response:
        refused = self._refusal(request, "typing", {})
        if refused is not None:
            return refused
        self.record("typing", {"channel": request.match_info["channel"]})
        return web.Response(status=204)

    async def followup(self, request: web.Request) -> web.Response:
        # Interaction webhooks are authorised by the interaction token in the path.
        body = await request.json()
        body["_token"] = request.match_info["token"]
        self.record("followup", body)
        return web.json_response(self._message(str(next(self.ids)), "0", body))

    async def gateway_bot(self, request: web.Request) -> web.Response:
        refused = self._refusal(request, "gateway_bot", {})
        if refused is not None:
            return refused
        ws_url = self.url.replace("http://", "ws://") + "/gateway"
        return web.json_response(
            {
                "url": ws_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def gateway(self, request: web.Request) -> web.WebSocketResponse:
        return await self.tracked(request, self._gateway_session)

    async def _gateway_session(
        self, request: web.Request, ws: web.WebSocketResponse
    ) -> web.WebSocketResponse:
        seq = itertools.count(1)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
        first = await ws.receive_json(timeout=10)
        with self.lock:
            self.gateway_frames.append(first)
        if (first.get("d") or {}).get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return ws
        if first.get("op") == 2:
            ready = {
                "v": 10,
                "user": {"id": self.bot_id, "username": "claw", "bot": True},
                "session_id": "fake-session",
                "resume_gateway_url": self.url.replace("http://", "ws://") + "/gateway",
                "guilds": [],
                "application": {"id": "7000", "flags": 0},
            }
            await ws.send_json({"op": 0, "t": "READY", "s": next(seq), "d": ready})
        while not ws.closed and not self.closing:
            with self.lock:
                pending = list(self.dispatches)
                self.dispatches.clear()
            for event in pending:
                await ws.send_json({"op": 0, "s": next(seq), **event})
            try:
                frame = await ws.receive(timeout=0.05)
            except TimeoutError:
                continue
            if frame.type != web.WSMsgType.TEXT:
                break
            data = json.loads(frame.data)
            with self.lock:
                self.gateway_frames.append(data)
            if data.get("op") == 1:
                await ws.send_json({"op": 11})
        return ws
