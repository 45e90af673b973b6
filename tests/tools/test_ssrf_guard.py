"""SSRF guard: every refused destination, by every path a URL can take (T3, T10, T11, H2).

The attack table goes through web_fetch and the registry executor, over real sockets
to a real local server where one exists, and checks the error type the model sees
(``ssrf_blocked``) and the rule that refused it. Host names get their addresses from a
resolver the test controls (no real DNS in tests); the allow-list is the only way the
tests reach their own 127.0.0.1 servers.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence

import pytest

from tests.tools.helpers import call, ctx_for
from tests.tools.servers.local_http import LocalServer
from tools_app.guards.ssrf import (
    AllowList,
    BlockedDestination,
    SsrfGuard,
    check_allow_pattern,
    classify_address,
    parse_ip_literal,
)
from tools_app.registry import SSRF_BLOCKED
from tools_app.web.fetch_tool import WebFetchTool

FAKE_DNS = {
    "internal.corp.test": ["10.1.2.3"],
    "metadata.corp.test": ["169.254.169.254"],
    "mixed.corp.test": ["93.184.216.34", "127.0.0.1"],  # one public, one loopback
    "v6loop.corp.test": ["::1"],
    "mapped.corp.test": ["::ffff:192.168.0.1"],
    "cgnat.corp.test": ["100.64.12.1"],
}


def fake_resolver(table: dict[str, Sequence[str]]):
    async def resolve(host: str, port: int) -> Sequence[str]:
        try:
            return table[host]
        except KeyError:
            raise OSError(8, "Name or service not known") from None

    return resolve


def fetch_tool(guard: SsrfGuard) -> WebFetchTool:
    async def guard_for(ctx):
        return guard

    return WebFetchTool(guard_for)


@pytest.fixture
def server():
    with LocalServer() as srv:
        srv.route("GET", "/", 200, "<html><body><p>local</p></body></html>", content_type="text/html")
        yield srv


# (url, category); {port} is the local server's port, so a refusal there is the guard's.
ATTACKS = [
    ("http://127.0.0.1:{port}/", "loopback"),
    ("http://localhost:{port}/", "loopback"),  # the real resolver: localhost is allowed in tests
    ("http://[::1]:{port}/", "loopback"),
    ("http://127.0.0.2:{port}/", "loopback"),
    ("http://0.0.0.0:{port}/", "unspecified"),
    ("http://[::]:{port}/", "unspecified"),
    ("http://169.254.1.1/", "link_local"),
    ("http://[fe80::1]/", "link_local"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/latest/meta-data/", "metadata"),
    ("http://100.100.100.200/", "metadata"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://[fd12:3456::1]/", "private"),
    ("http://100.64.0.1/", "shared"),
    ("http://100.127.255.254/", "shared"),
    ("http://[::ffff:127.0.0.1]:{port}/", "ipv4_mapped"),
    ("http://[::ffff:7f00:1]:{port}/", "ipv4_mapped"),
    ("http://[::ffff:10.0.0.1]/", "ipv4_mapped"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[64:ff9b::7f00:1]/", "ipv4_mapped"),  # NAT64 of 127.0.0.1
    ("http://[2002:c0a8:101::1]/", "ipv4_mapped"),  # 6to4 of 192.168.1.1
    ("http://2130706433:{port}/", "loopback"),  # integer 127.0.0.1
    ("http://0x7f000001:{port}/", "loopback"),  # hex
    ("http://0177.0.0.1:{port}/", "loopback"),  # octal
    ("http://0x7f.0.0.1:{port}/", "loopback"),  # mixed
    ("http://127.1:{port}/", "loopback"),  # short form
    ("http://2852039166/", "metadata"),  # integer 169.254.169.254
    ("http://0xa9fea9fe/", "metadata"),  # hex 169.254.169.254
    ("http://167772161/", "private"),  # integer 10.0.0.1
    ("http://internal.corp.test/", "private"),  # a name resolving to a private address
    ("http://metadata.corp.test/", "metadata"),
    ("http://mixed.corp.test/", "loopback"),  # any bad address refuses the name
    ("http://v6loop.corp.test/", "loopback"),
    ("http://mapped.corp.test/", "ipv4_mapped"),
    ("http://cgnat.corp.test/", "shared"),
    ("http://no-such-host.corp.test/", "unresolvable"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "private"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://127.0.0.1:{port}/_GET", "scheme"),
    ("ftp://example.com/", "scheme"),
]


@pytest.mark.parametrize(("url", "category"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_it_refuses_each_attack_with_its_error_type(server, url, category):
    guard = SsrfGuard(resolver=_resolver_with_localhost())
    result = asyncio.run(
        call(fetch_tool(guard), "web_fetch", {"url": url.format(port=server.port)}, ctx_for())
    )
    assert result.is_error
    assert result.error_type == SSRF_BLOCKED, result.content
    assert result.content.startswith("Refused to connect to"), result.content
    assert _category_of(guard, url.format(port=server.port)) == category
    assert not server.received, "the guard refused before any request reached the server"


def _resolver_with_localhost():
    table = {**FAKE_DNS, "localhost": ["127.0.0.1", "::1"]}
    return fake_resolver(table)


def _category_of(guard: SsrfGuard, url: str) -> str:
    async def check() -> str:
        try:
            _, host, port = guard.check_url(url)
            await guard.resolve_checked(host, port)
        except BlockedDestination as exc:
            return exc.category
        return "allowed"

    return asyncio.run(check())


REDIRECT_TARGETS = [
    ("http://169.254.169.254/latest/meta-data/iam/", "metadata"),
    ("http://2130706433:{other}/", "loopback"),
    ("http://[::ffff:127.0.0.1]:{other}/", "ipv4_mapped"),
    ("http://internal.corp.test/admin", "private"),
    ("http://127.0.0.1:{other}/", "loopback"),
    ("file:///etc/passwd", "scheme"),
]


@pytest.mark.parametrize(("target", "category"), REDIRECT_TARGETS, ids=[t[0] for t in REDIRECT_TARGETS])
def test_it_refuses_redirects_to_refused_destinations(server, target, category):
    with LocalServer() as other:
        other.route("GET", "/", 200, "secret internal page")
        location = target.format(other=other.port)
        server.redirect("/hop", location)
        # The first server is allowed (port-bound entry); the redirect's target is not.
        guard = SsrfGuard(AllowList.of([("127.0.0.1", server.port)]), resolver=fake_resolver(FAKE_DNS))
        result = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": server.url("/hop")}, ctx_for()))
        assert result.error_type == SSRF_BLOCKED, result.content
        assert _category_of(guard, location) == category
        assert [r.path for r in server.received] == ["/hop"]
        assert not other.received


def test_redirect_chains_are_followed_hop_by_hop_and_capped(server):
    guard = SsrfGuard(AllowList.of([("127.0.0.1", server.port)]))
    server.redirect("/a", server.url("/b"))
    server.redirect("/b", "/")  # relative
    result = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": server.url("/a")}, ctx_for()))
    assert not result.is_error, result.content
    assert "local" in result.content
    assert [r.path for r in server.received] == ["/a", "/b", "/"]
    server.redirect("/loop", server.url("/loop"))
    result = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": server.url("/loop")}, ctx_for()))
    assert result.is_error
    assert "redirects" in result.content


def test_the_address_is_resolved_once_and_pinned_with_the_original_host_header(server):
    answers = [["127.0.0.1"], ["10.9.9.9"]]
    lookups: list[str] = []

    async def rebinding(host: str, port: int):
        lookups.append(host)
        return answers[min(len(lookups) - 1, 1)]

    guard = SsrfGuard(AllowList.of(["pinned.corp.test"]), resolver=rebinding)
    url = f"http://pinned.corp.test:{server.port}/"
    result = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": url}, ctx_for()))
    assert not result.is_error, result.content
    assert lookups == ["pinned.corp.test"]  # one resolution, at connect time
    assert server.received[0].headers["host"] == f"pinned.corp.test:{server.port}"


def test_dns_rebinding_to_a_private_address_is_refused_at_connect_time(server):
    # The early URL check cannot see the address; the connection's check does.
    guard = SsrfGuard(resolver=fake_resolver({"rebind.corp.test": ["127.0.0.1"]}))
    guard.check_url(f"http://rebind.corp.test:{server.port}/")  # a name: nothing to refuse yet
    result = asyncio.run(
        call(fetch_tool(guard), "web_fetch", {"url": f"http://rebind.corp.test:{server.port}/"}, ctx_for())
    )
    assert result.error_type == SSRF_BLOCKED
    assert not server.received


def test_allow_list_entries_are_bound_to_their_port(server):
    with LocalServer() as other:
        other.route("GET", "/", 200, "other")
        guard = SsrfGuard(AllowList.of([("127.0.0.1", server.port)]))
        ok = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": server.url("/")}, ctx_for()))
        refused = asyncio.run(call(fetch_tool(guard), "web_fetch", {"url": other.url("/")}, ctx_for()))
    assert not ok.is_error
    assert refused.error_type == SSRF_BLOCKED


def test_metadata_endpoints_can_never_be_allowed():
    for pattern in ("169.254.169.254", "169.254.0.0/16", "fd00:ec2::254", "100.100.100.200/32"):
        with pytest.raises(ValueError, match="metadata"):
            check_allow_pattern(pattern)
    guard = SsrfGuard(AllowList.of(["metadata.corp.test", "*.corp.test"]), resolver=fake_resolver(FAKE_DNS))
    with pytest.raises(BlockedDestination) as refused:
        asyncio.run(guard.resolve_checked("metadata.corp.test", 80))
    assert refused.value.category == "metadata"


def test_allow_list_patterns_are_checked():
    assert check_allow_pattern(" Wiki.Corp.Example. ") == "wiki.corp.example"
    assert check_allow_pattern("10.1.2.3") == "10.1.2.3/32"
    assert check_allow_pattern("*.corp.example") == "*.corp.example"
    for bad in ("", "0.0.0.0/0", "::/0", "*.com", "exa mple.com", "2130706433", "http://x.test/"):
        with pytest.raises(ValueError):
            check_allow_pattern(bad)


def test_wildcard_and_network_entries():
    allow = AllowList.of(["*.corp.test", "10.20.0.0/16"])
    ten = ipaddress.ip_address("10.1.2.3")
    assert allow.permits("wiki.corp.test", ten, 443)
    assert not allow.permits("corp.test.evil.example", ten, 443)
    assert allow.permits("anything", ipaddress.ip_address("10.20.1.1"), 80)
    assert not allow.permits("anything", ipaddress.ip_address("10.21.1.1"), 80)


def test_public_addresses_pass_and_odd_spellings_are_read_as_addresses():
    assert classify_address(ipaddress.ip_address("93.184.216.34")) is None
    assert classify_address(ipaddress.ip_address("2606:2800:220:1::1")) is None
    assert classify_address(ipaddress.ip_address("::ffff:93.184.216.34")) is None
    assert parse_ip_literal("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip_literal("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip_literal("[fe80::1%eth0]") == ipaddress.ip_address("fe80::1")
    assert parse_ip_literal("deadbeef.example") is None
    assert parse_ip_literal("123.example") is None
