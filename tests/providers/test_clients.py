"""Provider clients share the process's certificate store: loading it took ~50 ms of
the run loop for each new client (a provider's first run on a loop), and every stream
on that loop stalled meanwhile."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from agents.providers.base import tls_context
from agents.providers.registry import build_provider


def test_new_clients_reuse_the_loaded_certificate_store(monkeypatch: pytest.MonkeyPatch) -> None:
    tls_context()  # loaded once (the worker's warm-up does this)
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args)
        load(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)

    async def first_client(kind: str) -> None:
        provider = build_provider(kind, base_url="https://llm.example", api_key="k")
        provider._get_client()  # type: ignore[attr-defined]
        await provider.aclose()  # type: ignore[attr-defined]

    for kind in ("openai", "anthropic", "openai"):
        asyncio.run(first_client(kind))  # a new loop each time: a new client
    assert loads == []
    assert isinstance(tls_context(), ssl.SSLContext)
    assert tls_context().verify_mode == ssl.CERT_REQUIRED
