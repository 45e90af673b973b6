"""Task functions the task-thread tests enqueue through django-q2."""

from __future__ import annotations

import threading

calls: list[tuple[str, str]] = []


def record(label: str) -> str:
    calls.append((label, threading.current_thread().name))
    return f"done {label}"


def fail(label: str) -> None:
    raise ValueError(f"broken {label}")
