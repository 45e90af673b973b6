"""The tool half of a loop step: check every call, then run them (E4, E8, E14).

:class:`ToolStepRunner` is used by the loop for each assistant message with tool
calls. ``prepare`` runs before anything executes -- validity, tool subset,
``before_tool_call`` hooks, duplicate detection, policy -- so a call that needs
approval stops the step before any sibling has a side effect. ``execute`` runs what
is left: consecutive parallel-safe calls concurrently, others alone in their place;
results are credential-scrubbed and passed through ``after_tool_call`` hooks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from agents.engine import tracing
from agents.engine.interfaces import (
    AFTER_TOOL_CALL,
    BEFORE_TOOL_CALL,
    CancelToken,
    EventSink,
    HookRunner,
    PendingStep,
    RunContext,
    RunStore,
    ToolExecutor,
    ToolTraits,
)
from agents.engine.scrub import scrub_credentials
from agents.engine.types import ToolCallPart, ToolResultPart
from agents.providers.accumulate import has_invalid_arguments

logger = logging.getLogger("claw.engine.tools")

CANCELLED_TOOL_TEXT = "Tool execution canceled by user"
TIMED_OUT_TOOL_TEXT = "Tool execution stopped: the run's time budget ran out"
DUPLICATE_CALL_TEXT = (
    "Not executed: an identical call (same tool, same arguments) was already made in "
    "this turn. Use its result instead of calling again."
)
INTERRUPTED_TOOL_TEXT = (
    "Interrupted: this call was started but the run stopped before it was confirmed "
    "finished. It was not run again because it may have side effects; check its "
    "effect before retrying."
)
INVALID_ARGUMENTS_TEXT = (
    "The arguments of this call were not valid JSON; nothing was run. Call the tool "
    "again with a JSON object of arguments."
)
RESULT_PREVIEW_CHARS = 500
DUPLICATE_EARLIER_RESULT_CHARS = 4_000


def canonical_call_signature(name: str, arguments: dict[str, Any]) -> str:
    """Name + canonical JSON of the arguments: equal for equal calls (E8)."""
    args = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return f"{name}\x00{args}"


def _trace_refusal(call: ToolCallPart, result: ToolResultPart, session_id: str) -> None:
    """A call refused before it ran (policy, hook, approval denied) is a span too."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.conversation.id": session_id,
    }
    with tracing.span(f"execute_tool {call.name}", tracing.SPAN_TOOL, attributes) as span:
        span.fail(result.content[:500], result.error_type or "tool_error")


def tool_error(call: ToolCallPart, error_type: str, content: str) -> ToolResultPart:
    return ToolResultPart(call.id, call.name, content, is_error=True, error_type=error_type)


@dataclass(slots=True)
class PreparedCall:
    """A call after hooks and checks; ``result`` is set when it must not run."""

    call: ToolCallPart
    traits: ToolTraits
    result: ToolResultPart | None = None
    # What the person asked to approve it is shown (PolicyDecision.details).
    approval_details: dict[str, Any] | None = None

    @property
    def needs_approval(self) -> bool:
        return self.result is not None and self.result.error_type == "approval_required"


class ToolStepRunner:
    """Checks and runs the tool calls of one loop (state kept across its steps)."""

    def __init__(
        self,
        *,
        tools: ToolExecutor,
        hooks: HookRunner,
        events: EventSink,
        store: RunStore,
        ctx: RunContext,
        cancel: CancelToken,
        known_tools: set[str],
        parallel: bool,
        dedupe: bool,
        persist: bool,
    ) -> None:
        self.tools = tools
        self.hooks = hooks
        self.events = events
        self.store = store
        self.ctx = ctx
        self.cancel = cancel
        self.known_tools = known_tools
        self.parallel = parallel
        self.dedupe = dedupe
        self.persist = persist
        # E8: signatures of calls already made in this turn -> their results.
        self.signatures: dict[str, ToolResultPart | None] = {}
        # Results of the current step by call id (read when a cancel lands mid-step).
        self.results: dict[str, ToolResultPart] = {}

    # ----------------------------------------------------------------- prepare

    async def prepare(
        self, calls: list[ToolCallPart], resume: PendingStep | None = None
    ) -> list[PreparedCall]:
        self.results = {}
        prepared: list[PreparedCall] = []
        batch: set[str] = set()
        for call in calls:
            item = PreparedCall(call, self.tools.traits(call.name))
            prepared.append(item)
            item.result = await self._check(item, resume, batch)
            if item.result is not None and not item.needs_approval:
                self.results[item.call.id] = item.result
                if item.result.is_error:
                    _trace_refusal(item.call, item.result, self.ctx.session_id)
        return prepared

    async def _check(
        self, item: PreparedCall, resume: PendingStep | None, batch: set[str]
    ) -> ToolResultPart | None:
        call = item.call
        if resume is not None:
            done = resume.finished.get(call.id)
            if done is not None:
                return done
            if call.id in resume.started and item.traits.side_effects:
                return tool_error(call, "interrupted", INTERRUPTED_TOOL_TEXT)
        if has_invalid_arguments(call):
            return tool_error(call, "invalid_arguments", INVALID_ARGUMENTS_TEXT)
        if call.name not in self.known_tools:
            return tool_error(call, "unknown_tool", f"Tool not found: {call.name}")
        hook = await self.hooks.run(
            BEFORE_TOOL_CALL,
            {"id": call.id, "name": call.name, "arguments": call.arguments},
            self.ctx,
        )
        if hook.blocked:
            return tool_error(call, "hook_blocked", hook.reason or "Blocked by a hook.")
        if hook.patches:
            call = item.call = replace(
                call,
                name=str(hook.patches.get("name", call.name)),
                arguments=dict(hook.patches.get("arguments", call.arguments)),
            )
            if call.name not in self.known_tools:
                return tool_error(call, "unknown_tool", f"Tool not found: {call.name}")
            item.traits = self.tools.traits(call.name)
        if self.dedupe:
            signature = canonical_call_signature(call.name, call.arguments)
            if signature in self.signatures or signature in batch:
                earlier = self.signatures.get(signature)
                text = DUPLICATE_CALL_TEXT
                if earlier is not None:
                    text += "\n\nEarlier result:\n" + earlier.content[:DUPLICATE_EARLIER_RESULT_CHARS]
                return ToolResultPart(call.id, call.name, text, error_type="duplicate")
            batch.add(signature)
        approval = resume.approvals.get(call.id) if resume is not None else None
        if approval is False:
            return tool_error(call, "approval_denied", "The user denied this call.")
        decision = await self.tools.check_policy(call, self.ctx)
        if decision.action == "deny":
            return tool_error(
                call, decision.error_type or "policy_denied", decision.reason or "Denied by policy."
            )
        if decision.action == "needs_approval" and approval is not True:
            item.approval_details = dict(decision.details) if decision.details else None
            return tool_error(call, "approval_required", decision.reason or "This call needs approval.")
        return None

    # ----------------------------------------------------------------- execute

    async def execute(self, prepared: list[PreparedCall]) -> None:
        """Run every call without a result. Stops starting calls once cancelled."""
        runnable = [p for p in prepared if p.result is None]
        if not runnable:
            return
        if not self.parallel or len(runnable) == 1:
            for item in runnable:
                if self.cancel.cancelled:
                    return
                await self._run_one(item)
            return
        # Consecutive parallel-safe calls form one concurrent group; any other call
        # runs alone in its place, so order holds where it can matter.
        group: list[PreparedCall] = []
        for item in runnable:
            if item.traits.parallel_safe:
                group.append(item)
                continue
            await self._run_group(group)
            group = []
            if self.cancel.cancelled:
                return
            await self._run_one(item)
        await self._run_group(group)

    async def _run_group(self, group: list[PreparedCall]) -> None:
        if self.cancel.cancelled or not group:
            return
        if len(group) == 1:
            await self._run_one(group[0])
        else:
            await asyncio.gather(*(self._run_one(item) for item in group))

    async def _run_one(self, item: PreparedCall) -> None:
        """Run one call; leaves no result if it was cancelled before finishing."""
        call = item.call
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.conversation.id": self.ctx.session_id,
        }
        with tracing.span(f"execute_tool {call.name}", tracing.SPAN_TOOL, attributes) as span:
            if span.verbose:
                span.record_input(tracing.arguments_json(call.arguments))
            await self._run_one_traced(item)
            result = self.results.get(call.id)
            if result is None:
                span.fail("cancelled", "cancelled")
                return
            if result.is_error:
                span.fail(result.content[:500], result.error_type or "tool_error")
            span.record_output(result.content)

    async def _run_one_traced(self, item: PreparedCall) -> None:
        call = item.call
        await self.events.emit("tool.call", {"id": call.id, "name": call.name, "arguments": call.arguments})
        if self.persist:
            await self.store.mark_tool_started(call, side_effects=item.traits.side_effects)
        started = time.perf_counter()
        try:
            if item.traits.side_effects:
                # Never torn down midway: it sees ctx.cancel and may stop itself, and
                # its result is recorded whatever happens next.
                result = await self.tools.execute(call, self.ctx)
            else:
                task = asyncio.ensure_future(self.tools.execute(call, self.ctx))
                remove = self.cancel.on_cancel(lambda _reason: task.cancel())
                try:
                    result = await task
                except asyncio.CancelledError:
                    if self.cancel.cancelled:
                        return
                    raise
                finally:
                    remove()
        except Exception as exc:
            # A tool bug must not kill the run: the model gets a typed error without
            # a stack trace (X5); the log gets the trace.
            logger.exception("tool %s raised", call.name)
            result = tool_error(call, "tool_error", f"{call.name} failed: {type(exc).__name__}")
        result = replace(
            result,
            tool_call_id=call.id,
            name=call.name,
            # E14: before the model, a hook or a log sees it.
            content=scrub_credentials(result.content),
            duration_ms=(
                result.duration_ms
                if result.duration_ms is not None
                else int((time.perf_counter() - started) * 1000)
            ),
        )
        result = await self._after_hooks(call, result)
        if self.persist:
            await self.store.mark_tool_finished(result)
        if self.dedupe:
            self.signatures[canonical_call_signature(call.name, call.arguments)] = result
        self.results[call.id] = result
        await self.events.emit(
            "tool.result",
            {
                "id": call.id,
                "name": call.name,
                "is_error": result.is_error,
                "error_type": result.error_type,
                "duration_ms": result.duration_ms,
                "preview": result.content[:RESULT_PREVIEW_CHARS],
            },
        )

    async def _after_hooks(self, call: ToolCallPart, result: ToolResultPart) -> ToolResultPart:
        hook = await self.hooks.run(
            AFTER_TOOL_CALL,
            {
                "id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "result": {
                    "content": result.content,
                    "is_error": result.is_error,
                    "error_type": result.error_type,
                },
            },
            self.ctx,
        )
        if hook.blocked:
            return replace(
                result,
                is_error=True,
                error_type="hook_blocked",
                content=hook.reason or "Result blocked by a hook.",
            )
        if hook.patches:
            return replace(
                result,
                content=str(hook.patches.get("content", result.content)),
                is_error=bool(hook.patches.get("is_error", result.is_error)),
                error_type=hook.patches.get("error_type", result.error_type),
            )
        return result
