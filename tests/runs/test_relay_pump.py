"""The worker's relay pump (agents.runtime.relay_pump) and partial-text writer
(agents.runtime.partials): events of many runs leave in order, batched while a send
is in flight; checkpoints of many turns share a statement and never land after the
step that clears them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents.actions.conversation import do_create_session
from agents.actions.runs import do_send_message
from agents.models import Turn, TurnState
from agents.runtime import partials
from agents.runtime.relay_pump import RelayPump, merge_deltas


def chunk(run: int, text: str, offset: int, stream: str = "s") -> tuple[int, int, str, dict[str, Any]]:
    return (run, 1, "chunk", {"text": text, "offset": offset, "stream": stream})


def test_a_runs_consecutive_deltas_merge_in_place_and_other_runs_keep_their_order() -> None:
    events = [
        chunk(1, "Hel", 0),
        chunk(2, "Bon", 0),
        chunk(1, "lo", 3),
        (1, 2, "tool.call", {"name": "x"}),
        chunk(1, "!", 5),
        chunk(2, "jour", 3),
        chunk(2, "again", 0, stream="t"),  # another LLM call: not joined
    ]
    merged = merge_deltas(events)
    assert [(run, kind, payload.get("text")) for run, _seq, kind, payload in merged] == [
        (1, "chunk", "Hello"),
        (2, "chunk", "Bonjour"),
        (1, "tool.call", None),
        (1, "chunk", "!"),
        (2, "chunk", "again"),
    ]
    assert merged[0][3]["offset"] == 0


def test_deltas_with_a_gap_or_over_the_size_cap_stay_apart() -> None:
    assert len(merge_deltas([chunk(1, "a", 0), chunk(1, "b", 5)])) == 2
    assert len(merge_deltas([chunk(1, "a" * 1500, 0), chunk(1, "b" * 600, 1500)])) == 2


class SlowRelay:
    """Records each call; the first waits until released."""

    def __init__(self, fail_first: bool = False) -> None:
        self.calls: list[list[tuple[int, int, str, dict[str, Any]]]] = []
        self.release = asyncio.Event()
        self.fail_first = fail_first

    async def relay(self, run_id: int, seq: int, event_type: str, payload: dict[str, Any]) -> None:
        raise AssertionError("relay_many is used when there is one")

    async def relay_many(self, events: list[tuple[int, int, str, dict[str, Any]]]) -> None:
        self.calls.append(events)
        if len(self.calls) == 1:
            await self.release.wait()
            if self.fail_first:
                raise RuntimeError("the layer is away")


async def test_events_queued_while_a_send_is_in_flight_go_out_together_in_order() -> None:
    relay = SlowRelay()
    pump = RelayPump(relay)
    pump.push(chunk(1, "a", 0))
    await asyncio.sleep(0)  # the first send starts and waits
    pump.push(chunk(2, "x", 0))
    pump.push(chunk(1, "b", 1))
    pump.push((2, 2, "run.completed", {}))
    flushed = asyncio.ensure_future(pump.flushed())
    await asyncio.sleep(0.01)
    assert not flushed.done()
    relay.release.set()
    await asyncio.wait_for(flushed, 1)
    assert [[(e[0], e[2], e[3].get("text")) for e in call] for call in relay.calls] == [
        [(1, "chunk", "a")],
        [(2, "chunk", "x"), (1, "chunk", "b"), (2, "run.completed", None)],
    ]


async def test_a_failed_send_does_not_stop_the_events_after_it() -> None:
    relay = SlowRelay(fail_first=True)
    pump = RelayPump(relay)
    pump.push(chunk(1, "lost", 0))
    await asyncio.sleep(0)
    pump.push((1, 2, "run.completed", {}))
    relay.release.set()
    await asyncio.wait_for(pump.flushed(), 1)
    assert [e[2] for e in relay.calls[-1]] == ["run.completed"]


@pytest.mark.django_db(transaction=True)
async def test_checkpoints_share_a_statement_and_forget_keeps_them_before_the_step(
    live_agent: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asgiref.sync import sync_to_async

    def make_turns() -> list[int]:
        turns = []
        for n in range(3):
            session = do_create_session(live_agent.agent, user=live_agent.member, title=f"p{n}")
            run = do_send_message(session, f"hello {n}", acting_user=live_agent.member)
            turns.append(run.turn_id)
        Turn.objects.unscoped().filter(pk__in=turns).update(state=TurnState.RUNNING)
        return turns

    turns = await sync_to_async(make_turns)()
    statements: list[list[int]] = []
    write = partials._write_batch

    def counting(turn_ids: list[int], texts: list[str]) -> None:
        statements.append(turn_ids)
        write(turn_ids, texts)

    monkeypatch.setattr(partials, "_write_batch", counting)
    monkeypatch.setattr(partials, "DELAY", 0.05)
    writer = partials.PartialTextWriter()
    writer.put(turns[0], "one")
    writer.put(turns[1], "tw")
    writer.put(turns[1], "two")  # the newest text wins
    writer.put(turns[2], "three")
    await writer.forget(turns[2])  # before its step: never written
    await asyncio.sleep(0.3)
    assert statements == [[turns[0], turns[1]]]

    def texts() -> dict[int, str]:
        return dict(Turn.objects.unscoped().filter(pk__in=turns).values_list("pk", "partial_text"))

    assert await sync_to_async(texts)() == {turns[0]: "one", turns[1]: "two", turns[2]: ""}
    # A finished turn keeps what it has: a late checkpoint is ignored.
    await sync_to_async(Turn.objects.unscoped().filter(pk=turns[0]).update)(
        state=TurnState.COMPLETE, partial_text=""
    )
    writer.put(turns[0], "late")
    await asyncio.sleep(0.3)
    assert (await sync_to_async(texts)())[turns[0]] == ""


async def test_forget_waits_for_a_write_in_flight_that_carries_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    started, release = threading.Event(), threading.Event()

    def blocking(turn_ids: list[int], texts: list[str]) -> None:
        started.set()
        release.wait(5)

    monkeypatch.setattr(partials, "_write_batch", blocking)
    monkeypatch.setattr(partials, "db_async", lambda fn: lambda *a: asyncio.to_thread(fn, *a))
    monkeypatch.setattr(partials, "DELAY", 0.0)
    writer = partials.PartialTextWriter()
    writer.put(7, "text")
    await asyncio.to_thread(started.wait, 5)
    other = asyncio.ensure_future(writer.forget(8))  # not in flight: returns at once
    forgetting = asyncio.ensure_future(writer.forget(7))
    await asyncio.sleep(0.05)
    assert other.done()
    assert not forgetting.done()
    release.set()
    await asyncio.wait_for(forgetting, 2)
