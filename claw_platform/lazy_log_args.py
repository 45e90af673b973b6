"""autobahn's debug-log arguments, formatted only when a debug line is written.

autobahn logs every frame it sends at debug level, and builds that line's arguments
first whatever the level: ``hltype(self.sendData)`` inspects the method and colours
its name with click, ``hlval`` colours the peer and the length. In ``bench/stream``
that was about 9% of Daphne's CPU while streaming, for lines that are never written.

:func:`install_lazy_autobahn_log_args` gives autobahn's WebSocket module versions of
``hltype`` and ``hlval`` that keep their arguments and format them (with autobahn's
own functions, so a debug line reads as before) when the line is formatted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autobahn import util
from autobahn.websocket import protocol


class _Formatted:
    """``render(*args, **kwargs)``, computed when converted to text."""

    __slots__ = ("args", "kwargs", "render")

    def __init__(self, render: Callable[..., str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.render = render
        self.args = args
        self.kwargs = kwargs

    def __str__(self) -> str:
        return self.render(*self.args, **self.kwargs)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    __repr__ = __str__


def _lazy(render: Callable[..., str]) -> Callable[..., _Formatted]:
    def later(*args: Any, **kwargs: Any) -> _Formatted:
        return _Formatted(render, args, kwargs)

    return later


def install_lazy_autobahn_log_args() -> None:
    """Patch autobahn's WebSocket protocol module (once per process)."""
    protocol.hltype = _lazy(util.hltype)  # type: ignore[attr-defined]
    protocol.hlval = _lazy(util.hlval)  # type: ignore[attr-defined]
