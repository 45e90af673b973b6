"""Cost of LLM calls from a model's price table (P5).

Prices are per million tokens, in the tenant's billing currency (USD by default),
for four kinds of tokens: plain input, output, cache read and cache write. Money is
``Decimal`` end to end so usage reports add up to the cent; floats would drift over
millions of records.

``Usage.input_tokens`` is the *uncached* prompt tokens (Anthropic's convention);
providers whose API counts cached tokens inside the prompt total (OpenAI) subtract
them when they normalise, so no token is billed twice here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from agents.engine.types import Usage

_MILLION = Decimal(1_000_000)
# Eight decimals: a single cached token of the cheapest model is still non-zero.
_QUANTUM = Decimal("0.00000001")


def _dec(value: Decimal | float | int | str) -> Decimal:
    # Going through str() keeps 0.3 as 0.3 rather than 0.299999999999999988898.
    return value if isinstance(value, Decimal) else Decimal(str(value))


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Price per million tokens of one model (the ModelProfile row's four prices)."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cache_read: Decimal = Decimal(0)
    cache_write: Decimal = Decimal(0)
    # False when the model profile leaves its prices empty: "unknown", not "free".
    known: bool = True

    @classmethod
    def per_million(
        cls,
        input: Decimal | float | int | str | None = 0,
        output: Decimal | float | int | str | None = 0,
        cache_read: Decimal | float | int | str | None = 0,
        cache_write: Decimal | float | int | str | None = 0,
    ) -> ModelPrice:
        """Build a price from plain numbers, e.g. ``ModelPrice.per_million(3, 15)``;
        an input or output price of ``None`` makes the price unknown (counted as 0)."""
        known = input is not None and output is not None
        return cls(_dec(input or 0), _dec(output or 0), _dec(cache_read or 0), _dec(cache_write or 0), known)

    @property
    def is_free(self) -> bool:
        return not (self.input or self.output or self.cache_read or self.cache_write)


FREE = ModelPrice()


def cost_of(usage: Usage, price: ModelPrice) -> Decimal:
    """Cost of one call: each token kind times its price per million, summed.

    >>> cost_of(Usage(1_000_000, 1_000_000), ModelPrice.per_million(3, 15))
    Decimal('18.00000000')
    """
    if price.is_free:
        return Decimal(0).quantize(_QUANTUM)
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / _MILLION
    return total.quantize(_QUANTUM)


@dataclass(slots=True)
class RunTotals:
    """Running totals of a run: tokens, money and calls, sub-agents included.

    The loop adds every LLM call it makes; a sub-agent adds its whole cost to its
    parent's totals when it finishes (E20), so a session's cost includes its children.
    """

    usage: Usage = field(default_factory=Usage)
    cost: Decimal = field(default_factory=lambda: Decimal(0))
    llm_calls: int = 0
    subagent_cost: Decimal = field(default_factory=lambda: Decimal(0))

    def add_call(self, usage: Usage, cost: Decimal) -> None:
        self.usage = self.usage + usage
        self.cost += cost
        self.llm_calls += 1

    def add_child(self, child: RunTotals) -> None:
        """Fold a finished sub-agent's totals into this (its parent's) totals."""
        self.usage = self.usage + child.usage
        self.cost += child.cost
        self.llm_calls += child.llm_calls
        self.subagent_cost += child.cost
