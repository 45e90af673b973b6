"""URL templates of admin-defined HTTP tools (T11): ``https://api.example.com/v1/items/{id}?q={query}``.

Placeholders may stand in the path and the query, never in the scheme or host: the
model fills them, and an HTTP tool's secret headers must only ever go to the host the
admin wrote. Values are percent-encoded as one path segment or one query value, so a
value cannot add path segments (``../``), parameters (``&``) or a fragment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")


class TemplateError(ValueError):
    pass


def template_placeholders(template: str) -> list[str]:
    return PLACEHOLDER.findall(template)


def check_url_template(template: str) -> list[str]:
    """Check a template's shape; return its placeholder names in order."""
    stripped = PLACEHOLDER.sub("x", template)
    if "{" in stripped or "}" in stripped:
        raise TemplateError("braces may only wrap a placeholder name, e.g. {item_id}")
    try:
        parts = urlsplit(template)
    except ValueError as exc:
        raise TemplateError(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise TemplateError("the URL must start with http:// or https://")
    if not parts.netloc or PLACEHOLDER.search(parts.scheme + "://" + parts.netloc):
        raise TemplateError("the host must be written out: placeholders may only appear in the path or query")
    if parts.username or parts.password:
        raise TemplateError("put credentials in a header, not in the URL")
    if parts.fragment:
        raise TemplateError("the URL may not have a #fragment")
    return template_placeholders(template)


def _text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TemplateError(f"{name} must be a string or number to go into the URL")


def expand_url_template(template: str, args: Mapping[str, Any]) -> str:
    """Fill the placeholders from ``args``. A path placeholder must have a value (else
    :class:`TemplateError`); a query parameter whose placeholder has none is left out."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if args.get(name) is None:
            raise TemplateError(f"the argument {name!r} is required (it is part of the URL)")
        return quote(_text(name, args[name]), safe="")

    base, sep, query = template.partition("?")
    url = PLACEHOLDER.sub(fill, base)
    if not sep:
        return url
    pairs = []
    for pair in query.split("&"):
        names = template_placeholders(pair)
        if any(args.get(name) is None for name in names):
            continue  # an optional parameter the model did not give
        pairs.append(PLACEHOLDER.sub(fill, pair))
    return url + ("?" + "&".join(pairs) if pairs else "")
