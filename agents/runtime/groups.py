"""Group chats (E16): in a session flagged ``is_group`` the agent answers only the
messages that address it -- its name or ``@slug`` in the text. Other messages are
kept as context for later turns and get no reply (no LLM call)."""

from __future__ import annotations

import re

from agents.runtime.resolution import ResolvedAgent


def addresses_agent(text: str, agent: ResolvedAgent) -> bool:
    """Whether ``text`` mentions the agent: ``@slug`` or its name as whole words
    (any case)."""
    if re.search(rf"(?<![\w@])@{re.escape(agent.slug)}(?![\w-])", text, re.IGNORECASE):
        return True
    name = agent.name.strip()
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE) is not None
