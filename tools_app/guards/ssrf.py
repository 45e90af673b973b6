"""SSRF guard: may a tool, MCP server, HTTP tool or hook open a connection to this address?

Every outbound connection of the product made on a tenant's behalf goes through
:class:`SsrfGuard`, at *connect time*: the host name is resolved once, every address it
resolves to is checked, and the connection is made to a checked address (the transports
in ``tools_app.net.transports`` pin it, keeping the original name for ``Host`` and TLS
SNI). So a name that resolves to a public address when a URL is checked and to
``127.0.0.1`` a moment later (DNS rebinding) gains nothing, and a redirect is checked
like any other connection.

Refused (each with a category, shown in the error the model reads):

- ``loopback``, ``unspecified`` (0.0.0.0, ::), ``link_local`` (169.254/16, fe80::/10),
  ``private`` (RFC 1918, fc00::/7 and the other non-global IANA ranges), ``shared``
  (100.64/10, carrier-grade NAT), ``multicast``, ``reserved``;
- ``metadata``: cloud instance-metadata endpoints (169.254.169.254 and friends) -- never
  allowed, not even by the allow-list;
- ``ipv4_mapped``: an IPv6 address that carries a non-public IPv4 one (::ffff:a.b.c.d,
  ::a.b.c.d, 6to4, NAT64, Teredo);
- every address spelling the resolver accepts is classified by value, so integer
  (``2130706433``), hex (``0x7f000001``), octal (``0177.0.0.1``) and short (``127.1``)
  forms of 127.0.0.1 are loopback like the dotted one;
- ``scheme`` (only http and https), ``unresolvable`` (a name with no address).

A tenant's :class:`AllowList` (admin-edited ``AllowedHost`` rows) lets named internal
services through: an entry is a host name (``wiki.corp.example``), a wildcard
(``*.corp.example``), an address or a network (``10.20.0.0/16``), optionally for one
port. There is no global bypass: tests reach their local servers through an allow-list
entry like anyone else.

Nothing here imports Django.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = frozenset({"http", "https"})

# Cloud instance-metadata endpoints: AWS/GCP/Azure/OpenStack/DigitalOcean, AWS ECS task
# metadata, AWS over IPv6, Alibaba Cloud, Oracle Cloud. Never reachable, allow-list or not.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598; not "private" to Python
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# One to four parts, each decimal, octal (leading 0) or hex (0x): what inet_aton reads.
_LEGACY_IPV4 = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)(\.(0[xX][0-9a-fA-F]*|[0-9]+)){0,3}$")


class BlockedDestination(Exception):
    """A connection the guard refuses. ``category`` names the rule (see module doc)."""

    def __init__(self, host: str, category: str, reason: str) -> None:
        self.host = host
        self.category = category
        self.reason = reason
        super().__init__(f"Refused to connect to {host}: {reason}.")

    @property
    def message(self) -> str:
        return str(self)


class UnresolvableHost(BlockedDestination):
    """The name resolves to no address (or the lookup failed)."""

    def __init__(self, host: str, detail: str = "") -> None:
        super().__init__(
            host, "unresolvable", "the host name does not resolve" + (f" ({detail})" if detail else "")
        )


# ------------------------------------------------------------------ classification


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host string spells, in any form a resolver would accept, or None.

    Handles dotted IPv4, IPv6 (with or without brackets, with a zone id), and the
    legacy IPv4 forms ``inet_aton`` reads: ``2130706433``, ``0x7f000001``,
    ``0177.0.0.1``, ``127.1``.
    """
    name = host.strip().strip("[]").rstrip(".")
    if "%" in name:
        name = name.split("%", 1)[0]
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if _LEGACY_IPV4.match(name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "an IPv4-mapped IPv6 address"
    if ip.sixtofour is not None:
        return ip.sixtofour, "a 6to4 IPv6 address"
    if ip.teredo is not None:
        return ip.teredo[1], "a Teredo IPv6 address"
    if any(ip in net for net in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "a NAT64 IPv6 address"
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "an IPv4-compatible IPv6 address"
    return None


def classify_address(ip: IPAddress) -> tuple[str, str] | None:
    """``(category, reason)`` if connecting to ``ip`` is refused, ``None`` if it is public."""
    if ip in METADATA_ADDRESSES:
        return "metadata", f"{ip} is a cloud metadata endpoint"
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner, kind = embedded
            refusal = classify_address(inner)
            if refusal is None:
                return None
            category = "metadata" if refusal[0] == "metadata" else "ipv4_mapped"
            return category, f"{ip} is {kind} for {inner} ({refusal[1]})"
    if ip.is_unspecified:
        return "unspecified", f"{ip} is the unspecified address"
    if ip.is_loopback:
        return "loopback", f"{ip} is a loopback address"
    if ip.is_link_local:
        return "link_local", f"{ip} is a link-local address"
    if ip.is_multicast:
        return "multicast", f"{ip} is a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "shared", f"{ip} is in the shared address space (100.64.0.0/10)"
    if ip.is_private:
        return "private", f"{ip} is a private address"
    if ip.is_reserved:
        return "reserved", f"{ip} is a reserved address"
    if not ip.is_global:
        return "private", f"{ip} is not a public address"
    return None


# ------------------------------------------------------------------- allow-list


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One allow-list entry: a host name, ``*.suffix``, an address or a network; a port or any."""

    pattern: str
    port: int | None = None

    @property
    def network(self) -> IPNetwork | None:
        try:
            return ipaddress.ip_network(self.pattern, strict=False)
        except ValueError:
            return None


def check_allow_pattern(pattern: str) -> str:
    """Normalise an allow-list pattern, or raise ``ValueError`` saying what is wrong."""
    value = pattern.strip().lower().rstrip(".")
    if not value:
        raise ValueError("enter a host name, *.domain, an address or a network such as 10.0.0.0/8")
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        pass
    else:
        if any(meta in network for meta in METADATA_ADDRESSES if meta.version == network.version):
            raise ValueError("cloud metadata endpoints cannot be allowed")
        if network.prefixlen == 0:
            raise ValueError("allowing every address defeats the guard; name the network of the service")
        return str(network)
    if parse_ip_literal(value) is not None:
        raise ValueError("write addresses in dotted (IPv4) or standard IPv6 form")
    name = value[2:] if value.startswith("*.") else value
    labels = name.split(".")
    if not all(re.fullmatch(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?", label) for label in labels):
        raise ValueError(f"{pattern!r} is not a host name, *.domain, address or network")
    if value.startswith("*.") and len(labels) < 2:
        raise ValueError("a wildcard needs a domain with at least two labels, e.g. *.corp.example")
    return value


@dataclass(frozen=True, slots=True)
class AllowList:
    """Internal services a tenant may reach although their addresses are not public."""

    entries: tuple[AllowEntry, ...] = ()

    @classmethod
    def of(cls, entries: Iterable[tuple[str, int | None] | str]) -> AllowList:
        parsed = []
        for entry in entries:
            pattern, port = (entry, None) if isinstance(entry, str) else entry
            parsed.append(AllowEntry(check_allow_pattern(pattern), port))
        return cls(tuple(parsed))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def permits(self, host: str, ip: IPAddress, port: int) -> bool:
        """Does an entry cover this connection (by the name asked for, or by address)?"""
        name = host.strip("[]").lower().rstrip(".")
        for entry in self.entries:
            if entry.port is not None and entry.port != port:
                continue
            network = entry.network
            if network is not None:
                if ip.version == network.version and ip in network:
                    return True
            elif entry.pattern.startswith("*."):
                if name.endswith(entry.pattern[1:]):
                    return True
            elif name == entry.pattern:
                return True
        return False


EMPTY_ALLOW_LIST = AllowList()


# ------------------------------------------------------------------------ guard

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """Addresses for ``host`` from the operating system's resolver (async, once)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class SsrfGuard:
    """Checks destinations against the rules and the tenant's allow-list.

    ``resolve_checked`` is what a transport calls at connect time; ``check_url`` is an
    early, resolution-free check for a clear error before any connection is attempted.
    ``resolver`` is replaceable so tests can give names addresses without real DNS.
    """

    def __init__(self, allow: AllowList = EMPTY_ALLOW_LIST, *, resolver: Resolver = system_resolver) -> None:
        self.allow = allow
        self.resolver = resolver

    def check_address(self, host: str, ip: IPAddress, port: int) -> None:
        """Raise :class:`BlockedDestination` unless ``ip`` may be reached (as ``host``)."""
        refusal = classify_address(ip)
        if refusal is None:
            return
        category, reason = refusal
        if category != "metadata" and self.allow.permits(host, ip, port):
            return
        raise BlockedDestination(host, category, reason)

    def check_url(self, url: str) -> tuple[str, str, int]:
        """Check scheme, host and port of ``url`` before connecting.

        Returns ``(scheme, host, port)``. An address literal (in any spelling) is
        classified here; a name is checked when it is resolved, at connect time.
        """
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise BlockedDestination(url[:200], "invalid_url", f"the URL is not valid ({exc})") from None
        scheme = (parts.scheme or "").lower()
        host = parts.hostname or ""
        if scheme not in ALLOWED_SCHEMES:
            raise BlockedDestination(
                host or url[:200],
                "scheme",
                f"only http and https URLs may be opened, not {scheme or 'none'!r}",
            )
        if not host:
            raise BlockedDestination(url[:200], "invalid_url", "the URL has no host")
        port = port or (443 if scheme == "https" else 80)
        ip = parse_ip_literal(host)
        if ip is not None:
            self.check_address(host, ip, port)
        return scheme, host, port

    async def resolve_checked(self, host: str, port: int) -> list[IPAddress]:
        """Resolve ``host`` once and check every address; the caller connects to these only.

        Any refused address refuses the host: a name that resolves to a public and a
        private address is treated as the private one.
        """
        literal = parse_ip_literal(host)
        if literal is not None:
            self.check_address(host, literal, port)
            return [literal]
        try:
            raw = await self.resolver(host, port)
        except OSError as exc:
            raise UnresolvableHost(host, exc.strerror or type(exc).__name__) from None
        addresses: list[IPAddress] = []
        for item in raw:
            ip = ipaddress.ip_address(item.split("%", 1)[0])
            self.check_address(host, ip, port)
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise UnresolvableHost(host)
        return addresses
