"""Provider instances for configured models.

A provider owns an ``httpx.AsyncClient`` (a connection pool bound to the event loop
that first used it), so instances are cached per provider configuration *and* per
event loop: every run in a worker's loop shares one pool per endpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from typing import Any

from agents.budgets.provider import BudgetedProvider
from agents.engine.interfaces import LLMProvider, ModelSpec
from agents.providers.registry import build_provider
from agents.runtime.resolution import ModelConfig

_providers: dict[tuple[Any, ...], tuple[asyncio.AbstractEventLoop, LLMProvider]] = {}
_lock = threading.Lock()


def _key(cfg: ModelConfig, loop: asyncio.AbstractEventLoop) -> tuple[Any, ...]:
    digest = hashlib.sha256(
        json.dumps(
            [
                cfg.provider_kind,
                cfg.base_url,
                cfg.api_key,
                cfg.extra_headers,
                cfg.timeout_seconds,
                cfg.max_retries,
            ],
            sort_keys=True,
        ).encode()
    ).hexdigest()
    return (cfg.provider_id, digest, id(loop))


def provider_for(cfg: ModelConfig) -> LLMProvider:
    loop = asyncio.get_running_loop()
    key = _key(cfg, loop)
    with _lock:
        hit = _providers.get(key)
        if hit is not None and hit[0] is loop and not loop.is_closed():
            return hit[1]
        provider = build_provider(
            cfg.provider_kind,
            base_url=cfg.base_url,
            api_key=cfg.api_key,
            name=cfg.provider_name,
            extra_headers=cfg.extra_headers,
            timeout=float(cfg.timeout_seconds),
            max_retries=cfg.max_retries,
        )
        _providers[key] = (loop, provider)
        # Entries of closed loops hold dead pools: drop them.
        for stale in [k for k, (lp, _) in _providers.items() if lp.is_closed()]:
            del _providers[stale]
        return provider


def model_spec(cfg: ModelConfig) -> ModelSpec:
    # Every call to the model goes through the budget guard (agents.budgets).
    return ModelSpec(
        provider=BudgetedProvider(provider_for(cfg), cfg.price),
        model=cfg.model,
        price=cfg.price,
        context_window=cfg.context_window,
        max_tokens=cfg.max_output_tokens,
        supports_vision=cfg.supports_vision,
    )


async def close_providers() -> None:
    """Close the pools of the running loop (end of `claw chat`, worker shutdown)."""
    loop = asyncio.get_running_loop()
    with _lock:
        mine = [k for k, (lp, _) in _providers.items() if lp is loop]
        providers = [_providers.pop(k)[1] for k in mine]
    for provider in providers:
        close = getattr(provider, "aclose", None)
        if close is not None:
            await close()
