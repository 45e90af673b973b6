"""autobahn's debug-log arguments are formatted only when a line is written
(claw_platform.lazy_log_args), and then read as autobahn's own."""

from __future__ import annotations

import logging

import pytest
from autobahn import util
from autobahn.websocket import protocol

from claw_platform.lazy_log_args import install_lazy_autobahn_log_args


@pytest.fixture
def lazy_args(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Installs the lazy arguments (undone after the test); lists each text autobahn's
    highlighter renders."""
    rendered: list[str] = []
    highlight = util.hl

    def counting(text: object, **options: object) -> str:
        rendered.append(str(text))
        return highlight(text, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(util, "hl", counting)
    monkeypatch.setattr(protocol, "hltype", protocol.hltype)
    monkeypatch.setattr(protocol, "hlval", protocol.hlval)
    install_lazy_autobahn_log_args()
    return rendered


def test_building_the_arguments_formats_nothing(lazy_args: list[str]) -> None:
    protocol.hltype(test_building_the_arguments_formats_nothing)
    protocol.hlval(1234)
    assert lazy_args == []


def test_a_written_line_reads_as_autobahns_own(
    lazy_args: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    func, size = protocol.hltype(util.hltype), protocol.hlval(1234, color="green")
    lazy_args.clear()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").debug("%s sent %s bytes", func, size)
    assert caplog.messages == [f"{util.hltype(util.hltype)} sent {util.hlval(1234, color='green')} bytes"]
    assert f"{protocol.hlval(7):>5}" == f"{util.hlval(7):>5}"
