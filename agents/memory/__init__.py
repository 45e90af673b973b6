"""Structured memory (M1, M7): the store interface tools and recall use, and its
PostgreSQL full-text implementation. Hybrid vector recall (M2) comes later behind
the same interface."""

from agents.memory.store import (
    MemoryError,
    MemoryHit,
    MemoryOwner,
    MemoryStore,
    PostgresMemoryStore,
    default_memory_store,
)

__all__ = [
    "MemoryError",
    "MemoryHit",
    "MemoryOwner",
    "MemoryStore",
    "PostgresMemoryStore",
    "default_memory_store",
]
