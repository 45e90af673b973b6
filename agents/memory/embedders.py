"""Embedders (P7): text to vectors for the hybrid recall.

The default is the local embedder, WordLlama (256 dimensions), whose weights and
tokenizer ship inside the ``wordllama`` wheel: it works offline, on a fresh machine,
with no provider configured. Its loader is pointed at the package's own folder
through ``cache_dir`` (its ``disable_download`` path looks in the wrong sub-folder)
and never downloads anything.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

MAX_EMBED_CHARS = 8_000  # what is embedded of one text (a memory is at most 4,000)


class EmbedderError(RuntimeError):
    """The embedder failed or answered wrongly; the message is safe to show an admin."""


class Embedder(Protocol):
    @property
    def key(self) -> str:
        """Names the embedder and its model; stored on each vector it made."""

    @property
    def dimension(self) -> int: ...

    @property
    def full_similarity(self) -> float:
        """The cosine similarity from which recall counts a vector match as a full one."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class LocalEmbedder:
    """WordLlama's 256-d model from the wheel, loaded once per process (thread-safe)."""

    key = "local:wordllama-l2-supercat-256"
    dimension = 256
    # WordLlama's similarities run low: a paraphrase scores 0.2-0.4, unrelated text ~0.
    full_similarity = 0.3

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    import wordllama
                    from wordllama import WordLlama

                    package = Path(wordllama.__file__).parent
                    self._model = WordLlama.load(
                        config="l2_supercat", dim=self.dimension, cache_dir=package, disable_download=True
                    )
        return self._model

    def embed_array(self, texts: Sequence[str]) -> Any:
        """The vectors as one float32 numpy array (unit length), for bulk work."""
        clipped = [(text or " ")[:MAX_EMBED_CHARS] for text in texts]
        try:
            return self.model().embed(clipped, norm=True, batch_size=512)
        except Exception as exc:
            raise EmbedderError(f"The local embedder failed: {type(exc).__name__}.") from exc

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return [[float(x) for x in row] for row in self.embed_array(texts)]


_local = LocalEmbedder()


def local_embedder() -> LocalEmbedder:
    return _local


def embedder_for_tenant(tenant_id: int) -> Embedder:
    """The embedder a tenant's memories use: its embedding model profile marked
    ``use_for_memory`` (on an enabled provider), else the local one."""
    from agents.memory.remote_embedder import RemoteEmbedder
    from agents.models import ModelKind, ModelProfile

    profile = (
        ModelProfile._base_manager.filter(
            tenant_id=tenant_id, kind=ModelKind.EMBEDDING, use_for_memory=True, provider__enabled=True
        )
        .select_related("provider")
        .first()
    )
    if profile is None or not profile.dimension:
        return _local
    return RemoteEmbedder.from_profile(profile)


def check_vectors(embedder: Embedder, vectors: Sequence[Sequence[float]], count: int) -> None:
    if len(vectors) != count:
        raise EmbedderError(f"The embedder {embedder.key} returned {len(vectors)} vectors for {count} texts.")
    for vector in vectors:
        if len(vector) != embedder.dimension:
            raise EmbedderError(
                f"The embedder {embedder.key} returned {len(vector)} dimensions, not {embedder.dimension}."
            )
