"""Is a mail's sender proven? (email inbound trust)

``From`` can be written by anyone, and a linked member is recognised by address, so a
mail acts as its sender only when the sender's domain vouches for it:

- a DKIM signature that verifies (dkimpy; the key looked up in DNS) whose ``d=``
  domain aligns with the ``From`` domain, relaxed as DMARC does: the same
  organizational domain (by the Public Suffix List), so ``d=example.com`` proves
  ``ada@mail.example.com`` but ``d=com`` proves nothing. A signature with a body
  length (``l=``) is not counted (text may be appended after the signed part);
- or, when the operator names its mail server's authserv-id
  (``CLAW_EMAIL_TRUSTED_AUTHSERV_ID``), the topmost ``Authentication-Results`` of
  that id saying ``dmarc=pass`` for the ``From`` domain. The mail server must add
  its own and remove any that arrive with its id (RFC 8601 §5), else this is as
  forgeable as From.

A mail with more than one ``From`` is never proven. An unproven mail is treated as
from an unlinked sender (never as the member), or refused, per the channel's
``unverified_mail``; :func:`apply` records why on the message.

The DNS lookup is :data:`dns_lookup` (dkimpy's ``dnsfunc``: a name in bytes → the
TXT record in bytes); None means dkimpy's own (dnspython). Lookups block, so
:func:`check` runs in a thread.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from email import message_from_bytes, policy
from email.utils import getaddresses

import dkim
from django.conf import settings
from publicsuffixlist import PublicSuffixList

from channels_app.adapters.base import InboundMessage

logger = logging.getLogger("claw.channels.email.trust")

DnsLookup = Callable[..., bytes | None]
dns_lookup: DnsLookup | None = None
DNS_TIMEOUT_SECONDS = 5
MAX_SIGNATURES = 5
UNVERIFIED_PREFIX = "unverified:"

_psl = PublicSuffixList()
_RESULT = re.compile(r"(?:^|;)\s*dmarc\s*=\s*(\w+)([^;]*)", re.IGNORECASE)
_HEADER_FROM = re.compile(r"header\.from\s*=\s*\"?([A-Za-z0-9.-]+)", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Verdict:
    verified: bool
    why: str  # how it was proven, or why not


def organizational_domain(domain: str) -> str:
    """``mail.example.co.uk`` → ``example.co.uk``; "" for a public suffix itself."""
    return _psl.privatesuffix(domain.strip(".").lower()) or ""


def aligned(signing_domain: str, from_domain: str) -> bool:
    org = organizational_domain(signing_domain)
    return bool(org) and org == organizational_domain(from_domain)


def _from_domain(raw: bytes) -> tuple[str, str]:
    """The From domain, or "" and why not."""
    mail = message_from_bytes(raw, policy=policy.compat32)
    values = mail.get_all("From") or []
    if len(values) != 1:
        return "", f"{len(values)} From headers"
    addresses = [a for _n, a in getaddresses([str(values[0])]) if a]
    if len(addresses) != 1 or "@" not in addresses[0]:
        return "", "no single From address"
    return addresses[0].rpartition("@")[2].lower(), ""


def _dkim(raw: bytes, from_domain: str) -> Verdict:
    lookup = dns_lookup
    checker = dkim.DKIM(raw, logger=logger, timeout=DNS_TIMEOUT_SECONDS)
    count = sum(1 for name, _v in checker.headers if name.lower() == b"dkim-signature")
    if not count:
        return Verdict(False, "no DKIM signature")
    reasons: list[str] = []
    for index in range(min(count, MAX_SIGNATURES)):
        try:
            ok = checker.verify(idx=index, dnsfunc=lookup) if lookup else checker.verify(idx=index)
        except dkim.DKIMException as exc:
            reasons.append(f"DKIM signature {index + 1}: {str(exc)[:80]}")
            continue
        domain = (checker.domain or b"").decode("ascii", "replace").lower()
        if not ok:
            reasons.append(f"DKIM signature of {domain} does not verify")
        elif b"l" in (checker.signature_fields or {}):
            reasons.append(f"DKIM signature of {domain} covers part of the body only (l=)")
        elif not aligned(domain, from_domain):
            reasons.append(f"DKIM signature of {domain} is not aligned with {from_domain}")
        else:
            return Verdict(True, f"DKIM d={domain}")
    return Verdict(False, "; ".join(reasons)[:300])


def _authentication_results(raw: bytes, from_domain: str, authserv_id: str) -> Verdict | None:
    """The trusted server's verdict (its topmost header); None when it left none."""
    mail = message_from_bytes(raw, policy=policy.compat32)
    for value in mail.get_all("Authentication-Results") or []:
        text = " ".join(str(value).split())
        server = text.split(";", 1)[0].strip().split(" ")[0].lower()
        if server != authserv_id.lower():
            continue
        result = _RESULT.search(text)
        if result is None:
            return Verdict(False, f"{authserv_id}: no DMARC result")
        verdict, details = result.group(1).lower(), result.group(2)
        domain = _HEADER_FROM.search(details)
        if verdict != "pass":
            return Verdict(False, f"{authserv_id}: dmarc={verdict}")
        if domain is None or domain.group(1).lower() != from_domain:
            return Verdict(False, f"{authserv_id}: dmarc=pass for another domain")
        return Verdict(True, f"dmarc=pass by {authserv_id}")
    return None


def check(raw: bytes) -> Verdict:
    """Whether ``raw``'s From is proven by its domain (see the module)."""
    try:
        from_domain, problem = _from_domain(raw)
        if not from_domain:
            return Verdict(False, problem)
        authserv_id = str(getattr(settings, "CLAW_EMAIL_TRUSTED_AUTHSERV_ID", "") or "").strip()
        if authserv_id:
            trusted = _authentication_results(raw, from_domain, authserv_id)
            if trusted is not None and trusted.verified:
                return trusted
            signed = _dkim(raw, from_domain)
            if signed.verified or trusted is None:
                return signed
            return Verdict(False, f"{trusted.why}; {signed.why}"[:300])
        return _dkim(raw, from_domain)
    except Exception as exc:  # a malformed mail is unproven, never a crash of the poller
        logger.info("sender check failed: %s", exc)
        return Verdict(False, f"not checkable ({type(exc).__name__})")


def apply(message: InboundMessage, verdict: Verdict) -> InboundMessage:
    """``message`` as the channel sees it: a proven sender unchanged; an unproven one
    under an id no member is linked to (``unverified:<address>``), marked with why."""
    # Kept with the stored mail: a mail restored after a crash is proven, or not, as
    # it was decided now (channels_app.recovery).
    raw = {**message.raw, "sender_check": verdict.why, "sender_proven": verdict.verified}
    if verdict.verified:
        return dataclasses.replace(message, raw=raw)
    return dataclasses.replace(
        message,
        sender_id=f"{UNVERIFIED_PREFIX}{message.sender_id}"[:200],
        unverified=verdict.why or "not proven",
        raw=raw,
    )
