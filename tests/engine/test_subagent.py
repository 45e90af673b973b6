"""Sub-agents, engine side (E20)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from agents.engine.cost import ModelPrice
from agents.engine.interfaces import (
    READ_ONLY,
    ModelSpec,
    RunContext,
    ToolTraits,
)
from agents.engine.prompt import PromptContext, build_system_prompt
from agents.engine.subagent import (
    SUBAGENT_MAX_ITERATIONS,
    SUBAGENT_TOOL_DENY_ALWAYS,
    SubagentConfig,
    run_subagent,
    subagent_denied_tools,
)
from agents.engine.types import LLMRequest, Usage
from tests.fakes.engine import (
    FakeTool,
    FakeToolExecutor,
    InMemorySessions,
    ScriptedProvider,
    text_turn,
    tool_call,
    tool_turn,
)

WRITES = ToolTraits(read_only=False, side_effects=True)
PRICE = ModelPrice.per_million(input=2, output=10)


def toolbox() -> FakeToolExecutor:
    return FakeToolExecutor(
        FakeTool("grep", "match at line 3", traits=READ_ONLY),
        FakeTool("read_file", "contents", traits=READ_ONLY),
        FakeTool("write_file", traits=WRITES),
        FakeTool("bash", traits=WRITES),
        FakeTool("sub_agent", traits=WRITES),
        FakeTool("memory_search", traits=READ_ONLY),
        FakeTool("sessions_list", traits=READ_ONLY),
    )


async def test_e20_child_runs_in_its_own_linked_session_with_read_only_tools() -> None:
    prompt = PromptContext(agent_name="Coder")
    parent = RunContext(session_id="parent-1", depth=0)
    sessions = InMemorySessions()
    tools = toolbox()

    def restricted(request: LLMRequest) -> None:
        assert sorted(t.name for t in request.tools) == ["grep", "read_file"]
        assert request.purpose == "sub_agent"
        expected = build_system_prompt(
            PromptContext(agent_name="Coder", is_subagent=True, can_spawn_subagents=False),
            "minimal",
        )
        assert request.system == expected

    provider = ScriptedProvider(
        [
            tool_turn(("grep", {"q": "TODO"}), ("write_file", {"p": "x"}), check=restricted),
            text_turn("Found one TODO at line 3."),
        ]
    )
    with provider:
        result = await run_subagent(
            "find TODOs",
            parent=parent,
            call_id="call_42",
            model=ModelSpec(provider, "m", PRICE),
            tools=tools,
            sessions=sessions,
            prompt=prompt,
        )
    assert result.status == "completed"
    # The parent model sees the answer and which of the child's tool calls failed.
    assert result.text.startswith("Found one TODO at line 3.")
    assert "write_file (unknown_tool)" in result.text
    assert sessions.requests == [("call_42", "find TODOs", 0)]
    child = sessions.children[0]
    assert [m.role for m in child.history] == ["user", "assistant", "tool", "assistant"]
    # A write attempt is refused even though the model named the tool.
    refused = child.history[2].tool_results[1]
    assert refused.is_error
    assert tools.counts["write_file"] == 0
    assert tools.contexts[0].depth == 1
    assert tools.contexts[0].extra["parent_session_id"] == "parent-1"
    tool_result = result.as_tool_result(tool_call("sub_agent", {}, id="call_42"))
    assert tool_result.content == result.text
    assert not tool_result.is_error


async def test_e20_child_cost_is_added_to_the_parent() -> None:
    parent = RunContext()
    parent.totals.add_call(Usage(100, 10), Decimal("0.001"))
    provider = ScriptedProvider(
        [
            tool_turn(("grep", {}), usage=Usage(1_000_000, 0)),
            text_turn("done", usage=Usage(0, 100_000)),
        ]
    )
    with provider:
        result = await run_subagent(
            "look",
            parent=parent,
            call_id="c1",
            model=ModelSpec(provider, "m", PRICE),
            tools=toolbox(),
            sessions=InMemorySessions(),
            prompt="sys",
        )
    assert result.totals.cost == Decimal("3")  # 2 (input) + 1 (output)
    assert parent.totals.cost == Decimal("3.001")
    assert parent.totals.subagent_cost == Decimal("3")
    assert parent.totals.llm_calls == 3
    assert sum(u.cost for u in result.store.usage) == Decimal("3")  # type: ignore[union-attr]


async def test_e20_iteration_cap_is_10() -> None:
    provider = ScriptedProvider([tool_turn(("grep", {"n": i})) for i in range(10)])
    with provider:
        result = await run_subagent(
            "loop",
            parent=RunContext(),
            call_id="c",
            model=ModelSpec(provider, "m"),
            tools=toolbox(),
            sessions=InMemorySessions(),
            prompt="sys",
        )
    assert SUBAGENT_MAX_ITERATIONS == 10
    assert result.status == "max_iterations"
    assert len(provider.requests) == 10


async def test_e20_no_spawning_beyond_the_depth_cap() -> None:
    with ScriptedProvider([]) as provider:
        result = await run_subagent(
            "recurse",
            parent=RunContext(depth=1),
            call_id="c",
            model=ModelSpec(provider, "m"),
            tools=toolbox(),
            sessions=(sessions := InMemorySessions()),
            prompt="sys",
        )
    assert result.status == "refused"
    assert sessions.children == []
    assert result.as_tool_result(tool_call("sub_agent", {}, id="c")).is_error


async def test_e20_depth_based_deny_lists() -> None:
    leaf = subagent_denied_tools(depth=1, max_depth=1)
    middle = subagent_denied_tools(depth=1, max_depth=2)
    assert {"sub_agent", "sessions_spawn", "sessions_list"} <= leaf
    assert "sub_agent" not in middle
    assert "sessions_list" not in middle
    assert middle >= SUBAGENT_TOOL_DENY_ALWAYS
    assert {"memory_search", "send_message", "cron"} <= SUBAGENT_TOOL_DENY_ALWAYS


async def test_e20_below_max_depth_a_child_may_spawn_but_not_use_deny_always_tools() -> None:
    def tools_offered(request: LLMRequest) -> None:
        assert sorted(t.name for t in request.tools) == [
            "grep",
            "read_file",
            "sessions_list",
            "sub_agent",
        ]

    with ScriptedProvider([text_turn("ok", check=tools_offered)]) as provider:
        await run_subagent(
            "plan",
            parent=RunContext(),
            call_id="c",
            model=ModelSpec(provider, "m"),
            tools=toolbox(),
            sessions=InMemorySessions(),
            prompt="sys",
            config=SubagentConfig(max_depth=2),
        )


async def test_e20_cancelling_the_parent_cancels_the_child() -> None:
    parent = RunContext()
    provider = ScriptedProvider([text_turn("working", hang=True)])
    task = asyncio.ensure_future(
        run_subagent(
            "slow",
            parent=parent,
            call_id="c",
            model=ModelSpec(provider, "m"),
            tools=toolbox(),
            sessions=InMemorySessions(),
            prompt="sys",
        )
    )
    await asyncio.sleep(0.02)
    parent.cancel.cancel()
    result = await task
    assert result.status == "cancelled"
    assert provider.cancelled_streams == 1
