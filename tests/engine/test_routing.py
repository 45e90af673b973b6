"""Model routing by classification rules and overrides (E22)."""

from __future__ import annotations

from agents.engine.routing import ClassificationRule, classify, route_model

RULES = [
    ClassificationRule("code", keywords=("Refactor", "stack trace"), patterns=("```",), priority=10),
    ClassificationRule("long", min_length=2000, priority=5),
    ClassificationRule("quick", max_length=40, keywords=("hi", "thanks"), priority=1),
]
ROUTES = {"code": "big-coder", "long": "long-context", "quick": "cheap"}


def test_e22_keywords_match_case_insensitively_and_patterns_case_sensitively() -> None:
    assert classify("please REFACTOR this module", RULES) == "code"
    assert classify("here:\n```py\nx=1\n```", RULES) == "code"
    assert classify("a 'Stack Trace' appeared", RULES) == "code"


def test_e22_length_bounds_and_length_only_rules() -> None:
    assert classify("x" * 2500, RULES) == "long"
    assert classify("thanks!", RULES) == "quick"
    assert classify("thanks " + "y" * 60, RULES) is None  # too long for "quick"
    assert classify("tell me about the weather in Lisbon tomorrow", RULES) is None


def test_e22_higher_priority_wins() -> None:
    text = "Refactor " + "z" * 3000
    assert classify(text, RULES) == "code"
    assert classify(text, list(reversed(RULES))) == "code"


def test_e22_route_model_uses_rules_then_default() -> None:
    decision = route_model("refactor it", default="main", rules=RULES, routes=ROUTES)
    assert (decision.choice, decision.source, decision.hint) == ("big-coder", "rule", "code")
    decision = route_model("what's new?", default="main", rules=RULES, routes=ROUTES)
    assert (decision.choice, decision.source) == ("main", "default")


def test_e22_hint_without_route_falls_back_to_default() -> None:
    decision = route_model("refactor", default="main", rules=RULES, routes={"long": "x"})
    assert decision.choice == "main"


def test_e22_overrides_beat_rules_session_first() -> None:
    common = {"default": "main", "rules": RULES, "routes": ROUTES}
    assert route_model("refactor", agent_override="agent-m", **common).choice == "agent-m"
    assert (
        route_model("refactor", agent_override="agent-m", channel_override="tg-m", **common).choice == "tg-m"
    )
    decision = route_model(
        "refactor",
        agent_override="agent-m",
        channel_override="tg-m",
        session_override="picked-by-/model",
        **common,
    )
    assert (decision.choice, decision.source) == ("picked-by-/model", "session")
