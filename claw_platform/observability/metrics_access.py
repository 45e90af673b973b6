"""Who may read ``/metrics``: a bearer token (generated once into
``./var/metrics_token`` like the secret key, or ``CLAW_METRICS_TOKEN``; shown by
``claw metrics-token``), or an address in ``CLAW_METRICS_ALLOW``. Loopback alone is
not enough: a local reverse proxy or a shell on the machine would be let in."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest

from claw_platform import config
from claw_platform.client_address import client_address


def metrics_token(var_dir: Path | None = None, *, rotate: bool = False) -> str:
    """The token scrapers send (made on first use)."""
    path = (var_dir or Path(settings.VAR_DIR)) / "metrics_token"
    if rotate and not config.env_str("CLAW_METRICS_TOKEN"):
        path.unlink(missing_ok=True)
        _token_digest.cache_clear()
    return config.secret_from_env_or_file(
        "CLAW_METRICS_TOKEN", path, lambda: "claw_metrics_" + secrets.token_urlsafe(32)
    )


@lru_cache(maxsize=1)
def _token_digest() -> bytes:
    return hashlib.sha256(metrics_token().encode()).digest()


@lru_cache(maxsize=8)
def _allowed(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def may_read_metrics(request: HttpRequest) -> bool:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header[:7].lower() == "bearer ":
        given = hashlib.sha256(header[7:].strip().encode()).digest()
        return hmac.compare_digest(given, _token_digest())
    allowed = _allowed(tuple(settings.CLAW_METRICS_ALLOW))
    if not allowed:
        return False
    address = client_address(request)
    if address is None:
        return False
    return any(ipaddress.ip_address(address) in network for network in allowed)
