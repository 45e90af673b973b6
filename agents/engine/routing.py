"""Model routing (E22): classification rules pick a model for each message.

As ZeroClaw's query classification: rules are tried by descending priority; a rule
matches when the message length is within ``min_length``/``max_length`` and any
keyword (case-insensitive substring) or any pattern (case-sensitive substring)
occurs in it. A rule with neither keywords nor patterns matches on length alone
(e.g. "long messages go to the big model"). The first matching rule's ``hint`` names
a route; a hint with no route falls through to the default.

Overrides beat rules, most specific first: the session's ``/model`` choice, then the
channel's override (CH4), then the agent's own override, then the rules, then the
agent's default model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ClassificationRule:
    """One rule of an agent's query classification (a setting in the admin)."""

    hint: str
    keywords: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    min_length: int | None = None
    max_length: int | None = None
    priority: int = 0

    def matches(self, text: str, lowered: str | None = None) -> bool:
        length = len(text)
        if self.min_length is not None and length < self.min_length:
            return False
        if self.max_length is not None and length > self.max_length:
            return False
        if not self.keywords and not self.patterns:
            return True
        low = text.lower() if lowered is None else lowered
        if any(keyword.lower() in low for keyword in self.keywords):
            return True
        return any(pattern in text for pattern in self.patterns)


def classify(text: str, rules: Sequence[ClassificationRule]) -> str | None:
    """The hint of the highest-priority matching rule, or ``None``.

    Ties in priority keep the order the rules were given in (a stable sort).
    """
    lowered = text.lower()
    for rule in sorted(rules, key=lambda r: -r.priority):
        if rule.matches(text, lowered):
            return rule.hint
    return None


@dataclass(frozen=True, slots=True)
class RouteDecision(Generic[T]):
    """Which model was chosen and why: ``source`` is one of session, channel, agent,
    rule, default; ``hint`` is the matching rule's hint when ``source == "rule"``."""

    choice: T
    source: str
    hint: str | None = None


def route_model(
    text: str,
    *,
    default: T,
    rules: Sequence[ClassificationRule] = (),
    routes: Mapping[str, T] | None = None,
    session_override: T | None = None,
    channel_override: T | None = None,
    agent_override: T | None = None,
) -> RouteDecision[T]:
    """Pick the model for one message. ``T`` is whatever the caller routes
    (a model name, a ``ModelSpec``): this function only chooses."""
    if session_override is not None:
        return RouteDecision(session_override, "session")
    if channel_override is not None:
        return RouteDecision(channel_override, "channel")
    if agent_override is not None:
        return RouteDecision(agent_override, "agent")
    if rules and routes:
        hint = classify(text, rules)
        if hint is not None and hint in routes:
            return RouteDecision(routes[hint], "rule", hint)
    return RouteDecision(default, "default")
