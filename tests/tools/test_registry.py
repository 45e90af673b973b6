"""The tool registry and its executor (T1), tool policy by role (X2), risk traits (T12)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agents.engine.interfaces import (
    READ_ONLY,
    ModelSpec,
    PolicyDecision,
    RunContext,
    ToolExecutor,
    ToolTraits,
)
from agents.engine.loop import LoopConfig, run_agentic_loop
from agents.engine.types import LLMRequest, Message, ToolCallPart
from tests.fakes.engine import InMemoryRunStore, ScriptedProvider, text_turn, tool_turn
from tools_app.builtins import BUILTIN_TOOLS, register_builtins
from tools_app.registry import (
    CANCELLED,
    ERROR_TYPES,
    INVALID_ARGUMENTS,
    MICROCLAW_ERROR_TYPES,
    PATH_POLICY_BLOCKED,
    PROCESS_EXIT,
    TIMEOUT,
    TOOL_ERROR,
    UNKNOWN_TOOL,
    CombinedToolSet,
    Registry,
    RegistryToolExecutor,
    Tool,
    ToolError,
    ToolOutput,
    ToolRegistrationError,
    ToolSet,
    builtin_registry,
    role_may_use,
)

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
RUNS_COMMANDS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="high")


# --------------------------------------------------------------------- test tools


class EchoTool(Tool):
    name = "echo"
    description = "Repeat a text."
    input_schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "times": {"type": "integer", "minimum": 1, "maximum": 5},
            "options": {
                "type": "object",
                "properties": {"upper": {"type": "boolean"}},
                "additionalProperties": False,
            },
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    traits = READ_ONLY

    def __init__(self, name: str = "echo") -> None:
        self.name = name
        self.seen: list[tuple[dict[str, Any], RunContext]] = []

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        self.seen.append((args, ctx))
        text = args["text"] * args.get("times", 1)
        return text.upper() if args.get("options", {}).get("upper") else text


class WriteNoteTool(Tool):
    name = "write_note"
    description = "Store a note."
    input_schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    traits = WRITES

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        return "stored"


class ShellTool(Tool):
    name = "shell"
    description = "Run a command."
    traits = RUNS_COMMANDS

    async def run(self, args: dict[str, Any], ctx: RunContext) -> ToolOutput:
        return ToolOutput("exit status 2\nno such file", is_error=True, error_type=PROCESS_EXIT)


class SlowTool(Tool):
    name = "slow"
    description = "Takes a while."
    traits = READ_ONLY
    timeout = 0.05

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.torn_down = False

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.torn_down = True
            raise
        return "finished"


class CarefulWriteTool(Tool):
    """Has side effects: must not be torn down by a cancel; watches ctx.cancel itself."""

    name = "careful_write"
    description = "Writes in steps, stopping cleanly between steps."
    traits = WRITES

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.steps = 0

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        self.started.set()
        for _ in range(5):
            if ctx.cancel.cancelled:
                return f"stopped cleanly after {self.steps} steps"
            await asyncio.sleep(0.01)
            self.steps += 1
        return "all steps written"


class BrokenTool(Tool):
    name = "broken"
    description = "Has a bug."
    traits = READ_ONLY

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        raise RuntimeError("could not open /srv/claw/tenants/42/secret.key: permission denied")


class BlockedPathTool(Tool):
    name = "read_secret"
    description = "Refuses sensitive paths."
    traits = READ_ONLY

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        raise ToolError(PATH_POLICY_BLOCKED, "Access to .ssh is not allowed.")


class ChattyTool(Tool):
    name = "chatty"
    description = "Says too much."
    traits = READ_ONLY
    max_output_chars = 100

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        return "x" * 250


def executor(*tools: Tool, role: str = "member", **kwargs: Any) -> RegistryToolExecutor:
    return RegistryToolExecutor(Registry("test", tools), role=role, **kwargs)


def call(name: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(f"call_{name}", name, arguments)


def names(tools: RegistryToolExecutor) -> list[str]:
    return [d.name for d in tools.definitions()]


# ----------------------------------------------------------- T1 definitions / X2


def test_t1_executor_implements_the_engine_tool_executor_protocol() -> None:
    tools: ToolExecutor = executor(EchoTool())
    assert [d.name for d in tools.definitions()] == ["echo"]
    definition = tools.definitions()[0]
    assert definition.description == "Repeat a text."
    assert definition.input_schema["required"] == ["text"]


def test_t1_definitions_follow_the_agent_allow_list() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), ShellTool(), allowed=frozenset({"echo", "shell"}))
    assert names(tools) == ["echo", "shell"]


def test_t1_deny_list_wins_over_the_allow_list() -> None:
    tools = executor(
        EchoTool(),
        WriteNoteTool(),
        ShellTool(),
        allowed=frozenset({"echo", "shell"}),
        denied=frozenset({"shell"}),
    )
    assert names(tools) == ["echo"]


def test_t1_no_allow_list_means_every_tool_except_denied_ones() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), ShellTool(), denied=frozenset({"write_note"}))
    assert names(tools) == ["echo", "shell"]


def test_t1_allow_and_deny_entries_may_be_patterns_for_a_whole_server() -> None:
    tools = executor(
        EchoTool("mcp_github_search"),
        EchoTool("mcp_github_issue"),
        EchoTool("mcp_jira_search"),
        allowed=frozenset({"mcp_github_*", "mcp_jira_search"}),
        denied=frozenset({"*_issue"}),
    )
    assert names(tools) == ["mcp_github_search", "mcp_jira_search"]


@pytest.mark.parametrize("role", ["owner", "admin", "member"])
def test_x2_members_and_above_get_tools_that_change_things(role: str) -> None:
    tools = executor(EchoTool(), WriteNoteTool(), ShellTool(), role=role)
    assert names(tools) == ["echo", "write_note", "shell"]


def test_x2_a_viewer_gets_only_read_only_tools() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), ShellTool(), role="viewer")
    assert names(tools) == ["echo"]


@pytest.mark.parametrize("role", ["", "guest", "Owner"])
def test_x2_an_unknown_role_fails_closed_to_read_only_tools(role: str) -> None:
    tools = executor(EchoTool(), WriteNoteTool(), role=role)
    assert names(tools) == ["echo"]
    assert role_may_use(role, READ_ONLY)
    assert not role_may_use(role, WRITES)


def test_x2_role_filter_applies_after_the_agent_lists() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), role="viewer", allowed=frozenset({"write_note"}))
    assert names(tools) == []


# ------------------------------------------------------------- T1/T12 traits


def test_t1_traits_expose_parallel_safety_and_risk() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), ShellTool())
    assert tools.traits("echo").parallel_safe
    assert tools.traits("echo").risk == "low"
    assert not tools.traits("write_note").parallel_safe
    assert tools.traits("write_note").side_effects
    assert tools.traits("shell").risk == "high"


def test_t1_traits_of_unknown_or_filtered_tools_are_the_cautious_defaults() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), role="viewer")
    for name in ("nope", "write_note"):
        traits = tools.traits(name)
        assert traits == ToolTraits()
        assert traits.side_effects
        assert not traits.parallel_safe


def test_t12_a_tool_without_declared_traits_is_treated_as_medium_risk_with_side_effects() -> None:
    class Undescribed(Tool):
        name = "undescribed"
        description = "Nobody said what it does."

        async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
            return ""

    assert Undescribed().traits == ToolTraits(
        read_only=False, side_effects=True, parallel_safe=False, risk="medium"
    )


# ---------------------------------------------------------------- T1 policy


async def test_t1_check_policy_allows_what_the_agent_may_use() -> None:
    tools = executor(EchoTool())
    assert await tools.check_policy(call("echo", text="hi"), RunContext()) == PolicyDecision.allow()


async def test_t1_check_policy_denies_a_tool_the_agent_may_not_use_with_a_reason() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), denied=frozenset({"write_note"}))
    decision = await tools.check_policy(call("write_note"), RunContext())
    assert decision.action == "deny"
    assert "not enabled for this agent" in decision.reason


async def test_x2_check_policy_denies_a_viewer_a_tool_that_changes_things() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), role="viewer")
    decision = await tools.check_policy(call("write_note"), RunContext())
    assert decision.action == "deny"
    assert "read-only" in decision.reason
    assert "viewer" in decision.reason


async def test_t1_check_policy_denies_an_unknown_tool() -> None:
    decision = await executor(EchoTool()).check_policy(call("nope"), RunContext())
    assert decision.action == "deny"
    assert "no tool named 'nope'" in decision.reason


async def test_t12_the_policy_seam_decides_for_allowed_tools() -> None:
    asked: list[tuple[str, str]] = []

    async def ask_for_risky_tools(tool: Tool, tool_call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        asked.append((tool.name, tool.traits.risk))
        if tool.traits.risk == "high":
            return PolicyDecision.needs_approval(f"{tool.name} is high risk")
        return PolicyDecision.allow()

    tools = executor(
        EchoTool(), ShellTool(), WriteNoteTool(), policy=ask_for_risky_tools, denied=frozenset({"write_note"})
    )
    ctx = RunContext()
    assert (await tools.check_policy(call("echo", text="x"), ctx)).action == "allow"
    decision = await tools.check_policy(call("shell"), ctx)
    assert decision.action == "needs_approval"
    assert decision.reason == "shell is high risk"
    # A tool the agent may not use is denied before the policy is asked.
    assert (await tools.check_policy(call("write_note"), ctx)).action == "deny"
    assert asked == [("echo", "low"), ("shell", "high")]


# ------------------------------------------------------------- T1 execution


async def test_t1_execute_runs_the_tool_with_the_run_context() -> None:
    echo = EchoTool()
    ctx = RunContext(tenant_id="t1", user_id="u1", session_id="s1")
    result = await executor(echo).execute(call("echo", text="ab", times=2), ctx)
    assert result.content == "abab"
    assert not result.is_error
    assert result.error_type is None
    assert result.tool_call_id == "call_echo"
    assert result.name == "echo"
    assert echo.seen[0][1] is ctx


async def test_t1_every_result_carries_a_measured_duration() -> None:
    class Pause(Tool):
        name = "pause"
        description = "Waits 30 ms."
        traits = READ_ONLY

        async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
            await asyncio.sleep(0.03)
            return "done"

    tools = executor(Pause(), EchoTool())
    slow = await tools.execute(call("pause"), RunContext())
    assert slow.duration_ms is not None
    assert slow.duration_ms >= 25
    for result in (
        await tools.execute(call("echo", text="x"), RunContext()),
        await tools.execute(call("nope"), RunContext()),
        await tools.execute(call("echo"), RunContext()),
    ):
        assert result.duration_ms is not None
        assert result.duration_ms >= 0


async def test_t1_invalid_arguments_name_the_field_path_and_what_was_expected() -> None:
    echo = EchoTool()
    result = await executor(echo).execute(call("echo", text="hi", times="three"), RunContext())
    assert result.is_error
    assert result.error_type == INVALID_ARGUMENTS
    assert "$.times" in result.content
    assert "'three' is not of type 'integer'" in result.content
    assert "Call echo again" in result.content
    assert echo.seen == []


async def test_t1_invalid_arguments_report_a_missing_required_field_by_name() -> None:
    result = await executor(EchoTool()).execute(call("echo", times=2), RunContext())
    assert result.error_type == INVALID_ARGUMENTS
    assert "'text' is a required property" in result.content


async def test_t1_invalid_arguments_report_nested_paths_and_unexpected_fields() -> None:
    result = await executor(EchoTool()).execute(
        call("echo", text="hi", times=9, options={"upper": "yes"}, colour="red"), RunContext()
    )
    assert result.error_type == INVALID_ARGUMENTS
    assert "$.options.upper: 'yes' is not of type 'boolean'" in result.content
    assert "$.times: 9 is greater than the maximum of 5" in result.content
    assert "('colour' was unexpected)" in result.content


async def test_t1_invalid_arguments_quote_huge_values_only_briefly() -> None:
    result = await executor(EchoTool()).execute(call("echo", text="hi", times="9" * 50_000), RunContext())
    assert result.error_type == INVALID_ARGUMENTS
    assert len(result.content) < 2_000


async def test_t1_unknown_tool_lists_the_available_tools() -> None:
    result = await executor(EchoTool(), WriteNoteTool()).execute(call("ech0"), RunContext())
    assert result.is_error
    assert result.error_type == UNKNOWN_TOOL
    assert "Unknown tool 'ech0'" in result.content
    assert "Available tools: echo, write_note" in result.content


async def test_x2_a_filtered_tool_called_anyway_is_unknown_and_not_run() -> None:
    tools = executor(EchoTool(), WriteNoteTool(), role="viewer")
    result = await tools.execute(call("write_note", note="x"), RunContext())
    assert result.error_type == UNKNOWN_TOOL
    assert "Available tools: echo." in result.content


async def test_t1_a_tool_error_keeps_its_type_and_message() -> None:
    result = await executor(BlockedPathTool()).execute(call("read_secret"), RunContext())
    assert result.is_error
    assert result.error_type == PATH_POLICY_BLOCKED
    assert result.content == "Access to .ssh is not allowed."


async def test_t1_a_tool_may_return_an_error_result_without_raising() -> None:
    result = await executor(ShellTool()).execute(call("shell"), RunContext())
    assert result.is_error
    assert result.error_type == PROCESS_EXIT
    assert "no such file" in result.content


async def test_t1_a_tool_that_runs_too_long_times_out_and_is_stopped() -> None:
    slow = SlowTool()
    result = await executor(slow).execute(call("slow"), RunContext())
    assert result.is_error
    assert result.error_type == TIMEOUT
    assert "timed out after 0.05 seconds" in result.content
    assert slow.torn_down


async def test_t1_cancelling_the_run_stops_a_side_effect_free_tool() -> None:
    slow = SlowTool()
    slow.timeout = 30
    ctx = RunContext()
    task = asyncio.ensure_future(executor(slow).execute(call("slow"), ctx))
    await slow.started.wait()
    ctx.cancel.cancel("user pressed stop")
    result = await asyncio.wait_for(task, 1)
    assert result.is_error
    assert result.error_type == CANCELLED
    assert slow.torn_down


async def test_t1_a_cancelled_run_starts_no_tool() -> None:
    echo = EchoTool()
    ctx = RunContext()
    ctx.cancel.cancel()
    result = await executor(echo).execute(call("echo", text="x"), ctx)
    assert result.error_type == CANCELLED
    assert echo.seen == []


async def test_t1_a_tool_with_side_effects_is_not_torn_down_but_sees_the_cancel() -> None:
    tool = CarefulWriteTool()
    ctx = RunContext()
    task = asyncio.ensure_future(executor(tool).execute(call("careful_write"), ctx))
    await tool.started.wait()
    await asyncio.sleep(0.015)
    ctx.cancel.cancel()
    result = await asyncio.wait_for(task, 1)
    assert not result.is_error
    assert result.content.startswith("stopped cleanly after")
    assert 1 <= tool.steps < 5


async def test_t1_cancelling_the_caller_cancels_the_tool_and_propagates() -> None:
    # The engine's tool step cancels its own task on /stop for side-effect-free
    # tools; the executor must let that cancellation through, not swallow it.
    slow = SlowTool()
    slow.timeout = 30
    task = asyncio.ensure_future(executor(slow).execute(call("slow"), RunContext()))
    await slow.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slow.torn_down


async def test_t1_long_output_is_capped_with_a_note() -> None:
    result = await executor(ChattyTool()).execute(call("chatty"), RunContext())
    assert not result.is_error
    assert result.content == "x" * 100 + "\n[output truncated: 150 chars omitted]"


async def test_t1_an_unexpected_exception_becomes_a_safe_tool_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="claw.tools"):
        result = await executor(BrokenTool()).execute(call("broken"), RunContext(run_id="r9"))
    assert result.is_error
    assert result.error_type == TOOL_ERROR
    assert "broken failed with an internal error (RuntimeError)" in result.content
    for leak in ("/srv", "secret.key", "Traceback", "permission denied", ".py"):
        assert leak not in result.content
    # The operator still gets the whole story in the log.
    assert "secret.key" in caplog.text
    assert "r9" in caplog.text


async def test_t1_a_bad_return_type_is_a_tool_error() -> None:
    class WrongType(Tool):
        name = "wrong"
        description = "Returns a number."
        traits = READ_ONLY

        async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
            return 42  # type: ignore[return-value]

    result = await executor(WrongType()).execute(call("wrong"), RunContext())
    assert result.error_type == TOOL_ERROR


async def test_t1_the_tool_gets_a_copy_of_the_arguments() -> None:
    class Mutator(Tool):
        name = "mutator"
        description = "Changes its arguments."
        traits = READ_ONLY

        async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
            args["added"] = True
            return "ok"

    tool_call = call("mutator", a=1)
    await executor(Mutator()).execute(tool_call, RunContext())
    assert tool_call.arguments == {"a": 1}


# ------------------------------------------------------- T1 sets and registration


def test_t1_two_tool_sets_compose_into_one_executor() -> None:
    builtin = Registry("builtin", [EchoTool(), WriteNoteTool()])
    mcp = Registry("mcp:github", [EchoTool("mcp_github_search")])
    assert isinstance(mcp, ToolSet)
    tools = RegistryToolExecutor([builtin, mcp], role="member", denied=frozenset({"write_note"}))
    assert names(tools) == ["echo", "mcp_github_search"]
    combined = CombinedToolSet(builtin, mcp)
    assert combined.name == "builtin+mcp:github"
    assert [t.name for t in combined.tools()] == ["echo", "write_note", "mcp_github_search"]


async def test_t1_a_tool_from_a_second_set_runs_through_the_same_pipeline() -> None:
    mcp = Registry("mcp:github", [EchoTool("mcp_github_search")])
    tools = RegistryToolExecutor([Registry("builtin", [WriteNoteTool()]), mcp], role="member")
    ok = await tools.execute(call("mcp_github_search", text="q"), RunContext())
    bad = await tools.execute(call("mcp_github_search"), RunContext())
    assert ok.content == "q"
    assert bad.error_type == INVALID_ARGUMENTS


def test_t1_duplicate_names_are_refused_at_registration() -> None:
    registry = Registry("builtin", [EchoTool()])
    with pytest.raises(ToolRegistrationError, match="duplicate tool name 'echo' in 'builtin'"):
        registry.register(EchoTool())


def test_t1_registering_the_same_tool_instance_again_is_a_no_op() -> None:
    echo = EchoTool()
    registry = Registry("builtin", [echo])
    registry.register(echo)
    assert registry.names() == ["echo"]


def test_t1_duplicate_names_across_tool_sets_are_refused() -> None:
    builtin = Registry("builtin", [EchoTool()])
    plugin = Registry("http:acme", [EchoTool()])
    with pytest.raises(ToolRegistrationError, match="offered by 'builtin' and 'http:acme'"):
        CombinedToolSet(builtin, plugin)
    with pytest.raises(ToolRegistrationError):
        RegistryToolExecutor([builtin, plugin], role="member")


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("name", "has space", "the name must match"),
        ("name", "x" * 65, "the name must match"),
        ("description", " ", "a description is required"),
        ("input_schema", {"type": "string"}, "must be of type 'object'"),
        (
            "input_schema",
            {"type": "object", "properties": {"a": {"type": "nonsense"}}},
            "invalid input schema",
        ),
        ("timeout", 0, "must be positive"),
    ],
)
def test_t1_malformed_tools_are_refused_at_registration(attribute: str, value: Any, message: str) -> None:
    tool = EchoTool()
    setattr(tool, attribute, value)
    with pytest.raises(ToolRegistrationError, match=message):
        Registry("test", [tool])


def test_t1_error_types_keep_microclaws_names_and_add_invalid_arguments() -> None:
    assert {
        "tool_error",
        "unknown_tool",
        "approval_required",
        "execution_policy_blocked",
        "path_policy_blocked",
        "env_access_blocked",
        "timeout",
        "spawn_error",
        "process_exit",
        "hook_blocked",
        "mcp_error",
        "mcp_rate_limited",
        "mcp_circuit_open",
    } == MICROCLAW_ERROR_TYPES
    assert INVALID_ARGUMENTS == "invalid_arguments"
    assert MICROCLAW_ERROR_TYPES | {INVALID_ARGUMENTS, CANCELLED} <= ERROR_TYPES


def test_t5_builtins_are_registered_when_the_app_is_ready() -> None:
    assert {"get_current_time", "compare_time", "calculate"} <= set(builtin_registry.names())
    register_builtins(builtin_registry)  # ready() running twice changes nothing
    assert len([n for n in builtin_registry.names() if n == "calculate"]) == 1
    time_tools = [t for t in BUILTIN_TOOLS if t.name in {"get_current_time", "compare_time", "calculate"}]
    assert len(time_tools) == 3
    for tool in time_tools:
        assert tool.traits == READ_ONLY
        assert tool.traits.risk == "low"


# ------------------------------------------------------------- with the engine


async def test_t1_the_engine_loop_runs_tools_through_the_registry_executor() -> None:
    """A viewer's run: the model sees only read-only tools, a bad call gets a typed
    error it can read, and the retry succeeds."""
    seen_tools: list[list[str]] = []

    def record(request: LLMRequest) -> None:
        seen_tools.append([t.name for t in request.tools])

    def last_results(request: LLMRequest) -> list[tuple[str | None, str]]:
        return [(r.error_type, r.content) for r in request.messages[-1].tool_results]

    replies: list[list[tuple[str | None, str]]] = []
    provider = ScriptedProvider(
        [
            tool_turn(("calculate", {"expr": "2+2"}), check=record),
            tool_turn(
                ("calculate", {"expression": "(2+3)*4-1"}), check=lambda r: replies.append(last_results(r))
            ),
            text_turn("19", check=lambda r: replies.append(last_results(r))),
        ]
    )
    tools = RegistryToolExecutor(
        [builtin_registry, Registry("extra", [WriteNoteTool()])],
        role="viewer",
    )
    message = Message.user("what is (2+3)*4-1?")
    with provider:
        outcome = await run_agentic_loop(
            [message],
            LoopConfig(ModelSpec(provider, "m"), system="sys"),
            tools=tools,
            store=InMemoryRunStore(),
            ctx=RunContext(),
            unsaved=[message],
        )
    assert outcome.status == "completed"
    assert "write_note" not in seen_tools[0]
    assert {"get_current_time", "compare_time", "calculate"} <= set(seen_tools[0])
    first, second = replies
    assert first[0][0] == INVALID_ARGUMENTS
    assert "'expression' is a required property" in first[0][1]
    assert second == [(None, "19")]
