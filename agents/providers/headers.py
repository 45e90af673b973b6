"""Checking HTTP headers someone typed (a provider's extra headers): a header name is an
RFC 9110 token, a value is printable ASCII (or tab), and the headers that frame the
request stay the HTTP client's. A CR or LF in a value would start a new header or the
body (header injection); httpx refuses some of these at send time, aiohttp's transport
not all, so they are refused here, when saved and again before each request."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Set by the HTTP client from the request itself; another value would corrupt the framing.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "te", "upgrade"})


def header_problem(name: object, value: object) -> str | None:
    """Why ``name: value`` cannot be sent, or None."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        return f"{name!r} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if name.lower() in FRAMING_HEADERS:
        return f"{name} is set by the HTTP client and cannot be given here"
    if not isinstance(value, str):
        return f"the value of {name} must be a string"
    for char in value:
        if char != "\t" and not (" " <= char <= "~"):
            return f"the value of {name} contains a line break, a control character or a non-ASCII character"
    return None


def headers_problem(headers: Mapping[Any, Any]) -> str | None:
    """The first problem of a map of headers, or None."""
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem:
            return problem
    return None
