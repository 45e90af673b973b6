"""Request bodies are encoded with orjson; what it refuses goes through the standard
library, so every body httpx's ``json=`` would have sent still goes out the same."""

from __future__ import annotations

import json

from agents.providers.base import encode_body


def test_a_body_encodes_as_compact_utf8_json() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "héllo ✓"}], "stream": True}
    raw = encode_body(body)
    assert raw == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert json.loads(raw) == body


def test_what_orjson_refuses_goes_through_the_standard_library() -> None:
    # A schema with an integer key and an integer beyond 64 bits (orjson rejects it).
    body = {"tools": [{"parameters": {"maximum": 2**70, 3: "x"}}]}
    assert json.loads(encode_body(body)) == {"tools": [{"parameters": {"maximum": 2**70, "3": "x"}}]}
