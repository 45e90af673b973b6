"""The client's address, as every throttle and audit row sees it.

The socket's peer (``REMOTE_ADDR``) by default. When that peer is one of the
operator's reverse proxies (``CLAW_TRUSTED_PROXIES``: addresses or networks), the
proxies' ``X-Forwarded-For`` is read from the right: each hop a trusted proxy added
is skipped, and the first address that is not a trusted proxy is the client. A
client cannot choose its address by sending the header itself: it is honoured only
from a trusted peer, and only up to the first hop that peer cannot vouch for.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _parse(text: str) -> IPAddress | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]:443"
        text = text[1 : text.index("]")]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def client_address(request: Any) -> str | None:
    peer = _parse(str(request.META.get("REMOTE_ADDR") or ""))
    if peer is None:
        return None
    proxies = _networks(tuple(getattr(settings, "CLAW_TRUSTED_PROXIES", ())))
    if not any(peer in network for network in proxies):
        return str(peer)
    hops = [hop for hop in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",") if hop.strip()]
    nearest = peer
    for hop in reversed(hops):
        address = _parse(hop)
        if address is None:
            break  # a hop no trusted proxy wrote: trust stops at the last proxy
        if not any(address in network for network in proxies):
            return str(address)
        nearest = address
    return str(nearest)
