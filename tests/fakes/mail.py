"""A local mail server for email channels: SMTP by aiosmtpd (AUTH required, each
message recorded as ``(mail from, rcpt tos, parsed message)``; ``fail_next(code)``
refuses the next DATA with that reply) and IMAP4rev1 by aioimaplib's bundled test
server (:meth:`deliver` puts a mail into a mailbox's INBOX with the next UID). Both
run on one event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import TYPE_CHECKING, Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session


def _import_imap_testing_server() -> Any:
    """aioimaplib's test server calls ``asyncio.get_event_loop()`` while its module is
    imported (a default argument that ``MockImapServer`` always overrides): give it a
    throw-away loop, since an earlier test may have left the main thread without one."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        import aioimaplib.imap_testing_server as module
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    return module


if TYPE_CHECKING:
    from aioimaplib.imap_testing_server import ImapProtocol, Mail, MockImapServer
else:
    _imap_testing = _import_imap_testing_server()
    ImapProtocol = _imap_testing.ImapProtocol
    Mail = _imap_testing.Mail
    MockImapServer = _imap_testing.MockImapServer


class StableImapServer(MockImapServer):
    """aioimaplib's server with one UIDVALIDITY (``FakeMailServer.uidvalidity``), as a
    real server keeps per mailbox (its own takes the clock at each connection)."""

    def __init__(self, owner: FakeMailServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    def run_server(
        self, host: str = "127.0.0.1", port: int = 1143, fetch_chunk_size: int = 0, ssl_context: Any = None
    ) -> Any:
        def create_protocol() -> Any:
            protocol = ImapProtocol(self._server_state, fetch_chunk_size, self.capabilities, self.loop)
            protocol.uidvalidity = self.owner.uidvalidity
            self._connections.append(protocol)
            return protocol

        return self.loop.create_server(create_protocol, host, port, ssl=ssl_context)


class FakeMailServer:
    def __init__(self, *, login: str, password: str) -> None:
        self.login = login
        self.password = password
        self.sent: list[tuple[str, list[str], EmailMessage]] = []
        self.auth_failures = 0
        self.failures: deque[str] = deque()
        self.lock = threading.Lock()
        self.smtp_port = 0
        self.imap_port = 0
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._imap: MockImapServer | None = None
        self.uidvalidity = 1_700_000_000

    # SMTP ------------------------------------------------------------------

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and data.login.decode() == self.login
            and data.password.decode() == self.password
        )
        if not ok:
            with self.lock:
                self.auth_failures += 1
        return AuthResult(success=ok)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.lock:
            if self.failures:
                return self.failures.popleft()
        raw = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        with self.lock:
            self.sent.append((str(envelope.mail_from), list(envelope.rcpt_tos), message))
        return "250 2.0.0 OK queued"

    def fail_next(self, reply: str, times: int = 1) -> None:
        with self.lock:
            self.failures.extend([reply] * times)

    def sent_mail(self) -> list[EmailMessage]:
        with self.lock:
            return [m for _f, _t, m in self.sent]

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate(self)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"mail: condition not met in {timeout}s; sent: {self.sent_mail()}")

    # IMAP ------------------------------------------------------------------

    def deliver(self, message: EmailMessage, *, to: str | None = None) -> int:
        """Put ``message`` into the INBOX of ``to`` (the channel's mailbox); its UID.
        A mail marked for DKIM (``tests.fakes.dkim_dns``) is signed first."""
        from tests.fakes.dkim_dns import FAKE_DKIM

        message = FAKE_DKIM.seal(message)
        assert self._imap is not None
        imap = self._imap
        future = asyncio.run_coroutine_threadsafe(
            self._deliver(imap, Mail(message), to or self.login), self._loop
        )
        return future.result(10)

    @staticmethod
    async def _deliver(imap: MockImapServer, mail: Mail, to: str) -> int:
        return int(imap.receive(mail, imap_user=to)[0])

    def rebuild(self, *, keep: int, to: str | None = None) -> None:
        """The mailbox rebuilt (restored from a backup, moved to another server): a
        new UIDVALIDITY, only the first ``keep`` mails left, renumbered from UID 1."""
        assert self._imap is not None
        state = self._imap._server_state

        async def renumber() -> None:
            inbox = state.mailboxes[to or self.login]["INBOX"]
            del inbox[keep:]
            for number, kept in enumerate(inbox, start=1):
                kept.id = kept.uid = number

        asyncio.run_coroutine_threadsafe(renumber(), self._loop).result(10)
        self.uidvalidity += 1

    # lifecycle -------------------------------------------------------------

    def start(self) -> FakeMailServer:
        started = threading.Event()

        async def serve() -> None:
            loop = asyncio.get_running_loop()
            smtp = await loop.create_server(
                lambda: SMTP(
                    self,
                    hostname="mail.test",
                    authenticator=self.authenticate,
                    auth_required=True,
                    auth_require_tls=False,
                ),
                "127.0.0.1",
                0,
            )
            self.smtp_port = smtp.sockets[0].getsockname()[1]
            self._imap = StableImapServer(self, loop=loop)
            imap = await self._imap.run_server(host="127.0.0.1", port=0)
            self.imap_port = imap.sockets[0].getsockname()[1]

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(serve())
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-mail", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
