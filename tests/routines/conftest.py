"""The chat-platform fakes for delivery tests (local fakes speaking each wire format)."""

from tests.chat_platforms.conftest import fake_callback, fake_telegram  # noqa: F401  (fixtures)
