"""Fixtures shared from other suites: the chat-platform fakes (local fakes speaking
each wire format) and runs executed in this process's worker loop."""

from tests.api.conftest import inline_runs  # noqa: F401  (fixture)
from tests.chat_platforms.conftest import fake_callback, fake_mail, fake_telegram  # noqa: F401  (fixtures)
