"""DKIM for the email tests: an RSA key per signing domain (selector ``s1``), mail
signed with dkimpy as a sender's mail server does (a mail marked with
``X-Test-Dkim-Domain`` is signed when the fake mail server receives it), and a fake DNS answering the
``s1._domainkey.<domain>`` TXT records (``v=DKIM1; k=rsa; p=…``) that
``channels_app.adapters.email.trust.dns_lookup`` is pointed at."""

from __future__ import annotations

import base64
import threading
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

SELECTOR = b"s1"
SIGN_HEADER = "X-Test-Dkim-Domain"


class FakeDkim:
    def __init__(self) -> None:
        self._keys: dict[str, rsa.RSAPrivateKey] = {}
        self._lock = threading.Lock()
        self.lookups: list[str] = []

    def key(self, domain: str) -> rsa.RSAPrivateKey:
        with self._lock:
            if domain not in self._keys:
                self._keys[domain] = rsa.generate_private_key(public_exponent=65537, key_size=1024)
            return self._keys[domain]

    def sign(self, message: EmailMessage, domain: str, *, length: bool = False) -> EmailMessage:
        """``message`` with a DKIM-Signature of ``domain`` (``length``: with ``l=``)."""
        pem = self.key(domain).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        raw = message.as_bytes(policy=policy.SMTP)
        signature = dkim.sign(
            raw,
            SELECTOR,
            domain.encode(),
            pem,
            include_headers=[b"from", b"to", b"subject", b"message-id"],
            length=length,
        )
        signed = BytesParser(policy=policy.default).parsebytes(signature + raw)
        assert isinstance(signed, EmailMessage)
        return signed

    def seal(self, message: EmailMessage) -> EmailMessage:
        """``message`` signed by the domain its ``X-Test-Dkim-Domain`` names (the
        marker removed), as the sender's server does when the mail leaves it: a test
        may still add attachments after writing the mail. Unmarked: unchanged."""
        domain = message.get(SIGN_HEADER)
        if not domain:
            return message
        del message[SIGN_HEADER]
        return self.sign(message, str(domain))

    def lookup(self, name: bytes, timeout: int = 5) -> bytes | None:
        """dkimpy's ``dnsfunc``: the TXT record of ``name``."""
        text = name.decode().rstrip(".")
        self.lookups.append(text)
        selector, _sep, domain = text.partition("._domainkey.")
        with self._lock:
            key = self._keys.get(domain)
        if selector != SELECTOR.decode() or key is None:
            return None
        der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return b"v=DKIM1; k=rsa; p=" + base64.b64encode(der)


# One set of keys for the test session (keys are slow-ish to make).
FAKE_DKIM = FakeDkim()
