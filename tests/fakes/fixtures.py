"""Pytest fixtures for the fakes. Registered from ``tests/conftest.py``::

pytest_plugins = ["tests.fakes.fixtures", "tests.fakes.network"]
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.fake_llm import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A running :class:`FakeLLM` (background thread, works in sync and async tests).

    At teardown the test fails if a scripted turn was left unused or a request came
    that no turn answered (STYLE rule 13).
    """
    fake = FakeLLM().start()
    try:
        yield fake
    finally:
        fake.stop()
    problems = fake.problems()
    if problems:
        pytest.fail("fake LLM:\n" + "\n".join(problems), pytrace=False)
