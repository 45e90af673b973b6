"""The remote embedder (P7): a model profile of kind ``embedding`` on an
OpenAI-compatible provider, called at ``POST {base_url}/embeddings``.

Every call goes through the budget guard like the product's other LLM calls: the
worst case (every input token at the profile's input price) is reserved against the
budgets of the current charge (the run's, when recall embeds a question; the
tenant's, for the background embedding), and the real cost is settled from the
answer's ``usage``. Each call leaves a usage record of purpose ``embedding``.
Failures (down, refused, wrong dimension, an answer too large) raise
:class:`EmbedderError` with a message safe to show an admin; the memories stay
found by text and are embedded later.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import orjson

from agents.budgets.errors import BudgetRefused
from agents.budgets.guard import reserve, settle
from agents.budgets.scope import Charge, current_charge
from agents.engine.cost import ModelPrice
from agents.memory.embedders import MAX_EMBED_CHARS, EmbedderError, check_vectors

MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # 256 texts x 2,000 floats as JSON is ~10 MB
MAX_BATCH = 256
_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class RemoteEmbedder:
    key: str
    tenant_id: int
    profile_id: int
    provider_name: str
    base_url: str
    api_key: str
    model: str
    dimension: int
    price: ModelPrice
    timeout_seconds: float
    extra_headers: tuple[tuple[str, str], ...] = ()
    # Remote models score paraphrases higher than WordLlama does.
    full_similarity: float = 0.6

    @classmethod
    def from_profile(cls, profile: Any) -> RemoteEmbedder:
        provider = profile.provider
        return cls(
            key=f"remote:{profile.pk}:{profile.model}:{profile.dimension}"[:120],
            tenant_id=profile.tenant_id,
            profile_id=profile.pk,
            provider_name=provider.name,
            base_url=provider.base_url.rstrip("/"),
            api_key=provider.api_key or "",
            model=profile.model,
            dimension=int(profile.dimension),
            # Embeddings have no output: a known input price is enough.
            price=ModelPrice.per_million(input=profile.input_price, output=profile.output_price or 0),
            timeout_seconds=float(min(provider.timeout_seconds, 120)),
            extra_headers=tuple((str(k), str(v)) for k, v in (provider.extra_headers or {}).items()),
        )

    def _charge(self) -> Charge:
        charge = current_charge()
        if charge is not None and charge.tenant_id == self.tenant_id:
            return charge
        return Charge(tenant_id=self.tenant_id)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            vectors.extend(
                self._embed_batch([(t or " ")[:MAX_EMBED_CHARS] for t in texts[start : start + MAX_BATCH]])
            )
        check_vectors(self, vectors, len(texts))
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        charge = self._charge()
        estimate = sum((len(t) + 3) // 4 for t in texts)
        try:
            reservation = reserve(
                charge, model=self.model, price=self.price, input_tokens=estimate, max_output_tokens=0
            )
        except BudgetRefused as refused:
            self._record(charge, 0, Decimal(0), 0, f"refused by the budget: {refused.message}")
            raise EmbedderError(f"The embedder {self.model} was not called: {refused.message}") from None
        started = time.monotonic()
        tokens, error = 0, ""
        try:
            data = self._post(texts)
            vectors, tokens = _parse(data, len(texts))
            tokens = tokens or estimate
            return vectors
        except EmbedderError as exc:
            error = str(exc)
            raise
        finally:
            cost = (Decimal(tokens) * self.price.input / _MILLION).quantize(Decimal("0.00000001"))
            settle(reservation, cost)
            self._record(charge, tokens, cost, int((time.monotonic() - started) * 1000), error)

    def _post(self, texts: list[str]) -> Any:
        headers = dict(self.extra_headers)
        headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        try:
            with (
                httpx.Client(timeout=self.timeout_seconds, follow_redirects=False) as client,
                client.stream(
                    "POST", f"{self.base_url}/embeddings", content=orjson.dumps(body), headers=headers
                ) as resp,
            ):
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise EmbedderError(
                            f"The embedder {self.model} answered more than {MAX_RESPONSE_BYTES:,} bytes."
                        )
                    chunks.append(chunk)
                status = resp.status_code
        except httpx.HTTPError as exc:
            raise EmbedderError(
                f"The embedder {self.model} could not be reached ({type(exc).__name__})."
            ) from None
        if status != 200:
            raise EmbedderError(f"The embedder {self.model} answered HTTP {status}.")
        try:
            return orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError:
            raise EmbedderError(f"The embedder {self.model} answered something that is not JSON.") from None

    def _record(self, charge: Charge, tokens: int, cost: Decimal, latency_ms: int, error: str) -> None:
        from agents.models import UsagePurpose, UsageRecord

        UsageRecord._base_manager.create(
            tenant_id=self.tenant_id,
            agent_id=charge.agent_ids[0] if charge.agent_ids else None,
            user_id=charge.user_id,
            provider=self.provider_name[:100],
            model=self.model[:200],
            purpose=UsagePurpose.EMBEDDING,
            input_tokens=tokens,
            cost=cost,
            latency_ms=latency_ms,
            error=error[:500],
            counted=True,  # not a session's turn: nothing to roll up
        )


def _parse(data: Any, count: int) -> tuple[list[list[float]], int]:
    """The vectors in input order and the prompt tokens of an OpenAI embeddings answer."""
    try:
        items = sorted(data["data"], key=lambda item: int(item["index"]))
        vectors = [[float(x) for x in item["embedding"]] for item in items]
    except (KeyError, TypeError, ValueError):
        raise EmbedderError("The embedder's answer is not an OpenAI embeddings list.") from None
    if len(vectors) != count:
        raise EmbedderError(f"The embedder returned {len(vectors)} vectors for {count} texts.")
    usage = data.get("usage") if isinstance(data, dict) else None
    tokens = 0
    if isinstance(usage, dict):
        raw = usage.get("prompt_tokens", usage.get("total_tokens", 0))
        tokens = raw if isinstance(raw, int) and raw >= 0 else 0
    return vectors, tokens
