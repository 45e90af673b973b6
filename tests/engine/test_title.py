"""Session titles (E21) and the cheap model with fallback (P6)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.engine.cost import ModelPrice, RunTotals
from agents.engine.interfaces import ModelSpec, UsageRecord
from agents.engine.light import (
    TITLE_MAX_CHARS,
    clean_title,
    complete_light,
    generate_title,
    start_title_generation,
)
from agents.engine.types import LLMRequest, Message, ProviderError, Usage
from tests.fakes.engine import RecordingEventSink, ScriptedProvider, error_turn, text_turn


def models(
    main_turns: list, cheap_turns: list
) -> tuple[ScriptedProvider, ScriptedProvider, ModelSpec, ModelSpec]:
    main = ScriptedProvider(main_turns, name="main")
    cheap = ScriptedProvider(cheap_turns, name="cheap")
    return (
        main,
        cheap,
        ModelSpec(main, "main-model", ModelPrice.per_million(10, 10)),
        ModelSpec(cheap, "cheap-model", ModelPrice.per_million(1, 1)),
    )


async def test_p6_light_work_uses_the_cheap_model() -> None:
    main, cheap, main_spec, cheap_spec = models([], [text_turn("ok", usage=Usage(1000, 0))])
    totals = RunTotals()
    request = LLMRequest(model="", messages=[Message.user("x")], purpose="heartbeat")
    with main, cheap:
        result = await complete_light(request, main=main_spec, cheap=cheap_spec, totals=totals)
    assert result.model is cheap_spec
    assert not result.fell_back
    assert cheap.requests[0].model == "cheap-model"
    assert result.records[0].purpose == "heartbeat"
    assert result.records[0].cost == Decimal("0.001")
    assert totals.cost == Decimal("0.001")


async def test_p6_falls_back_to_the_main_model_when_the_cheap_one_fails() -> None:
    main, cheap, main_spec, cheap_spec = models([text_turn("from main")], [error_turn("server")])
    request = LLMRequest(model="", messages=[Message.user("x")], purpose="summary")
    with main, cheap:
        result = await complete_light(request, main=main_spec, cheap=cheap_spec)
    assert result.fell_back
    assert result.model is main_spec
    assert result.response.message.text == "from main"
    assert [(r.model, r.error) for r in result.records] == [
        ("cheap-model", "server"),
        ("main-model", ""),
    ]


async def test_p6_without_a_cheap_model_the_main_one_is_used_and_its_errors_raise() -> None:
    main, _, main_spec, _ = models([error_turn("auth", "bad key")], [])
    request = LLMRequest(model="", messages=[Message.user("x")])
    with main, pytest.raises(ProviderError):
        await complete_light(request, main=main_spec)


async def test_e21_title_is_generated_on_the_cheap_model_and_cleaned() -> None:
    main, cheap, main_spec, cheap_spec = models([], [text_turn('Title: "Fixing the login bug"\n')])
    with main, cheap:
        result = await generate_title(
            "my login page crashes when I click submit", main=main_spec, cheap=cheap_spec
        )
    assert result.title == "Fixing the login bug"
    assert cheap.requests[0].purpose == "title"
    assert cheap.requests[0].tools == []
    assert "not more than 50 characters" in cheap.requests[0].system


async def test_e21_title_falls_back_to_the_first_words_when_every_model_fails() -> None:
    main, cheap, main_spec, cheap_spec = models([error_turn()], [error_turn()])
    with main, cheap:
        result = await generate_title("Budget for Q3: marketing", main=main_spec, cheap=cheap_spec)
    assert result.title == "Budget for Q3 - marketing"
    assert result.error is not None


def test_e21_titles_are_one_short_line_without_quotes_or_colons() -> None:
    assert clean_title("  “Weekend plans”  \nmore") == "Weekend plans"
    long = clean_title("word " * 30)
    assert len(long) <= TITLE_MAX_CHARS
    assert long.endswith("…")
    assert clean_title("") == "New conversation"
    assert ":" not in clean_title("Re: invoices")


async def test_e21_background_title_saves_and_emits_title_updated() -> None:
    saved: list[tuple[str, list[UsageRecord]]] = []

    async def save(title: str, records: list[UsageRecord]) -> None:
        saved.append((title, records))

    events = RecordingEventSink()
    main, cheap, main_spec, cheap_spec = models([], [text_turn("Quarterly report")])
    with main, cheap:
        task = start_title_generation(
            "write the quarterly report", main=main_spec, cheap=cheap_spec, save=save, events=events
        )
        assert not task.done()  # returned at once: the caller is not blocked
        result = await task
    assert result.title == "Quarterly report"
    assert saved[0][0] == "Quarterly report"
    assert saved[0][1][0].purpose == "title"
    assert events.events == [("title.updated", {"title": "Quarterly report"})]
