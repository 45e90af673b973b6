"""Cost per call from the model's price table (P5) and run totals."""

from __future__ import annotations

from decimal import Decimal

from agents.engine.cost import FREE, ModelPrice, RunTotals, cost_of
from agents.engine.types import Usage


def test_p5_each_token_kind_is_priced_per_million() -> None:
    price = ModelPrice.per_million(input=3, output=15, cache_read="0.30", cache_write="3.75")
    assert cost_of(Usage(1_000_000, 0), price) == Decimal("3")
    assert cost_of(Usage(0, 1_000_000), price) == Decimal("15")
    assert cost_of(Usage(0, 0, cache_read_tokens=1_000_000), price) == Decimal("0.3")
    assert cost_of(Usage(0, 0, cache_write_tokens=1_000_000), price) == Decimal("3.75")
    assert cost_of(Usage(1200, 350, 10_000, 2_000), price) == Decimal("0.01935")


def test_p5_money_is_exact_decimal_not_float() -> None:
    price = ModelPrice.per_million(input=0.1, output=0.3)
    total = sum((cost_of(Usage(1, 1), price) for _ in range(1000)), Decimal(0))
    assert total == Decimal("0.0004")
    assert isinstance(total, Decimal)


def test_p5_free_models_cost_nothing() -> None:
    assert cost_of(Usage(10**9, 10**9), FREE) == 0
    assert FREE.is_free
    assert not ModelPrice.per_million(input=1).is_free


def test_run_totals_fold_in_children() -> None:
    parent, child = RunTotals(), RunTotals()
    parent.add_call(Usage(10, 5), Decimal("0.5"))
    child.add_call(Usage(1, 1), Decimal("0.25"))
    child.add_call(Usage(1, 1), Decimal("0.25"))
    parent.add_child(child)
    assert parent.cost == Decimal("1.0")
    assert parent.subagent_cost == Decimal("0.5")
    assert parent.llm_calls == 3
    assert parent.usage == Usage(12, 7)
