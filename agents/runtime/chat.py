"""One user message, end to end: slash command or a turn of the agent loop.

Django-side glue around ``agents.engine.turn.run_turn``: it resolves the agent (G2),
opens the turn (with its undo checkpoint), binds the PostgreSQL store, builds the
system-prompt context and the turn settings from the agent, runs the turn and closes
it. The web UI, the API, routines and `claw chat` all come through here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agents.actions.attachments import turn_images
from agents.actions.config import do_save_agent_file
from agents.actions.conversation import (
    do_finish_turn,
    do_new_thread,
    do_redo,
    do_set_title,
    do_start_turn,
    do_switch_thread,
    do_undo,
)
from agents.budgets.scope import charge_for_run, charging, run_origin
from agents.engine.commands import SlashCommand, parse_slash_command
from agents.engine.compaction import CompactionSettings
from agents.engine.history import PruneSettings
from agents.engine.interfaces import CancelToken, EventSink, HookRunner, RunContext, ToolExecutor, UsageRecord
from agents.engine.prompt import DelegationTarget, PromptContext
from agents.engine.streaming import DEFAULT_COALESCE_SECONDS
from agents.engine.turn import (
    AutoCompactMiddleware,
    StopMiddleware,
    TurnConfig,
    TurnResult,
    compact_session,
    resume_turn,
    run_turn,
)
from agents.memory.injection import recall_for_turn
from agents.models import AgentFile, Message, ModelProfile, Session, Turn
from agents.routines.light import prompt_mode_for
from agents.runtime.agent_command import agent_command
from agents.runtime.context_commands import clear_command, skills_command
from agents.runtime.groups import addresses_agent
from agents.runtime.llm import model_spec
from agents.runtime.resolution import ModelConfig, ResolvedAgent, model_config, resolve_agent, tenant_models
from agents.runtime.routing import choose_model, record_run_model
from agents.runtime.store import DjangoRunStore, TurnBinding
from agents.runtime.tools import close_tools, registry_hooks, registry_tools, tool_skills
from channels_app.prompt_facts import CHANNEL_KINDS, with_channel_facts
from claw_platform.db import db_async, is_database_outage, readable_failure
from claw_platform.tenancy.context import tenant_context

VERSION = "0.1.0"

HELP_TEXT = """Commands:
/new              start a new conversation thread
/clear            clear the agent's context (the history is kept)
/skills [name]    list the agent's skills, or activate one
/thread <id>      switch to a thread; /resume <id> too
/undo, /redo      take back the last turn, or bring it back
/compact          summarise older history now (also /summarize)
/model [name]     show or switch this session's model; /model default resets
/models           list the models you can switch to
/agent [slug]     show or switch the agent of this chat (also ends a handoff)
/tools            the tools this agent may use
/status           agent, model, tokens and cost of this session
/stop             stop the running reply
/ping, /version, /help"""

ToolsFactory = Callable[[ResolvedAgent, Session], Awaitable[ToolExecutor]]


@dataclass
class ChatReply:
    """What the caller shows: a command's answer or a turn's outcome."""

    text: str
    status: str
    command: str | None = None
    turn: TurnResult | None = None
    turn_id: int | None = None
    notices: list[str] = field(default_factory=list)


async def handle_message(
    session_id: Any,
    text: str,
    *,
    events: EventSink | None = None,
    cancel: CancelToken | None = None,
    tools_factory: ToolsFactory = registry_tools,
    stream: bool = True,
) -> ChatReply:
    """Answer ``text`` in the session: a slash command at once, else a full turn."""
    session = await db_async(_load_session)(session_id)
    agent = await db_async(resolve_agent)(session.agent_id)
    command = parse_slash_command(text)
    if command is not None:
        return await _run_command(command, session, agent, tools_factory)
    return await _run_turn(
        session, agent, text, events=events, cancel=cancel, tools_factory=tools_factory, stream=stream
    )


def _load_session(session_id: Any) -> Session:
    return Session._base_manager.select_related("agent", "user").get(pk=session_id)


# ----------------------------------------------------------------------- turns


def turn_config(
    agent: ResolvedAgent,
    model: ModelConfig,
    *,
    stream: bool = True,
    events: EventSink | None = None,
    prompt_mode: str = "full",
) -> TurnConfig:
    # A sink that batches deltas by itself gets every delta at once (no fixed delay).
    immediate = bool(getattr(events, "batches_deltas", False))
    return TurnConfig(
        max_iterations=agent.max_iterations,
        parallel_tools=agent.parallel_tools,
        stream=stream,
        show_thinking=agent.show_thinking,
        input_guard_mode=agent.input_guard_mode,
        history_turns=agent.history_turn_limit,
        prune=PruneSettings(),
        compaction=CompactionSettings(
            message_threshold=agent.compaction_message_threshold,
            trigger_ratio=agent.compaction_trigger_ratio,
            keep_recent=agent.compaction_keep_recent,
        ),
        time_budget=float(agent.time_budget_seconds),
        max_tokens=model.max_output_tokens,
        temperature=agent.temperature,
        extra_body=dict(model.body_overrides),
        delta_batch_seconds=0.0 if immediate else DEFAULT_COALESCE_SECONDS,
        prompt_mode=prompt_mode,
    )


def _session_model(session: Session, agent: ResolvedAgent) -> ModelConfig:
    if session.model_override_id:
        profile = (
            ModelProfile._base_manager.select_related("provider")
            .filter(pk=session.model_override_id, tenant_id=session.tenant_id)
            .first()
        )
        if profile is not None:
            return model_config(profile)
    return agent.model


def prompt_context(
    agent: ResolvedAgent, session: Session, tools: ToolExecutor, model: ModelConfig, *, first_run: bool
) -> PromptContext:
    user = session.user
    return PromptContext(
        agent_name=agent.name,
        agent_id=agent.slug,
        identity=agent.description,
        context_files=agent.context_files(session.user_id),
        tools=tools.definitions(),
        skills=tool_skills(tools),
        user_name=(user.get_full_name() or user.get_username()) if user else None,
        user_id=str(session.user_id) if session.user_id else None,
        timezone=agent.timezone,
        channel=session.channel,
        is_group_chat=session.is_group,
        is_first_run=first_run,
        is_subagent=session.depth > 0,
        delegation_targets=[DelegationTarget(f"{d.name} ({d.slug})", d.description) for d in agent.delegates],
        model=model.model,
        provider=model.provider_name,
        session_id=str(session.pk),
    )


async def _run_turn(
    session: Session,
    agent: ResolvedAgent,
    text: str,
    *,
    events: EventSink | None,
    cancel: CancelToken | None,
    tools_factory: ToolsFactory,
    stream: bool,
) -> ChatReply:
    if not agent.enabled:
        return ChatReply(f"The agent {agent.name} is disabled.", "failed")
    turn = await db_async(_start_turn)(session, text)
    return await run_started_turn(
        session, agent, turn, text, events=events, cancel=cancel, tools_factory=tools_factory, stream=stream
    )


async def run_started_turn(
    session: Session,
    agent: ResolvedAgent,
    turn: Turn,
    text: str,
    *,
    events: EventSink | None,
    cancel: CancelToken | None,
    tools_factory: ToolsFactory,
    stream: bool = True,
    run_id: str = "",
    resume: bool = False,
    approvals: dict[str, bool] | None = None,
    hooks: HookRunner | None = None,
    on_ready: Callable[[], None] | None = None,
) -> ChatReply:
    """Run an opened turn to its end (a worker's entry): ``run_turn`` for a fresh
    turn, ``resume_turn`` (with ``approvals``) for one a worker crashed in or that
    waited for approval. The turn is closed with the outcome either way. ``hooks``
    defaults to the tenant's hooks for the agent (H1-H3); what the tools and hooks
    opened (MCP connections, HTTP clients) is closed when the run ends. ``on_ready``
    is called once the run is set up (model, tools, hooks, prompt), before the
    engine starts."""
    # Only an overridden model is read from the database; else the agent's routing
    # rules (E22) pick one for this message, and the run records the choice.
    if session.model_override_id:
        model_cfg, route = await db_async(_session_model)(session, agent), "session"
    else:
        model_cfg, route = choose_model(agent, session.channel, text)
    if run_id and (route != "default" or agent.routes):
        await db_async(record_run_model)(run_id, model_cfg, route)
    store = DjangoRunStore(_binding(session, turn), send_images=model_cfg.supports_vision)
    tools = await tools_factory(agent, session)
    try:
        hooks = hooks if hooks is not None else await registry_hooks(agent, session, tools)
        return await _drive_turn(
            session,
            agent,
            turn,
            text,
            store=store,
            model_cfg=model_cfg,
            tools=tools,
            hooks=hooks,
            events=events,
            cancel=cancel,
            stream=stream,
            run_id=run_id,
            resume=resume,
            approvals=approvals,
            on_ready=on_ready,
        )
    finally:
        await close_tools(tools, hooks)


async def _drive_turn(
    session: Session,
    agent: ResolvedAgent,
    turn: Turn,
    text: str,
    *,
    store: DjangoRunStore,
    model_cfg: ModelConfig,
    tools: ToolExecutor,
    hooks: HookRunner | None,
    events: EventSink | None,
    cancel: CancelToken | None,
    stream: bool,
    run_id: str,
    resume: bool,
    approvals: dict[str, bool] | None,
    on_ready: Callable[[], None] | None = None,
) -> ChatReply:
    ctx = RunContext(
        tenant_id=str(session.tenant_id),
        user_id=str(session.user_id or ""),
        agent_id=str(agent.agent_id),
        session_id=str(session.pk),
        run_id=run_id,
        channel=session.channel,
        depth=session.depth,
        cancel=cancel or CancelToken(),
        # The delegate tool announces a handoff on the run's live stream (G5).
        extra={"timezone": agent.timezone, "events": events},
    )
    first_run = turn.number == 1 and not session.title
    prompt = prompt_context(agent, session, tools, model_cfg, first_run=first_run)
    if session.external_key and session.channel in CHANNEL_KINDS:
        # A chat platform's conversation: a group leaves personal memory out (E16),
        # the channel may add to the prompt (CH4).
        prompt = await db_async(with_channel_facts)(prompt, session.pk)
    # G4: summaries on the tenant's summarizer agent's model, titles on its title
    # agent's; else the agent's cheap model; else (the engine falls back) its main one.
    summary = agent.light_summary_model
    cheap = model_spec(summary) if summary else None
    titles = agent.light_title_model
    title_model = model_spec(titles) if titles else None
    if session.depth == 0:  # sub-agents get the minimal prompt, without recall
        snippets = await db_async(recall_for_turn)(session, text, int(run_id) if run_id else None)
        prompt = dataclasses.replace(prompt, memory_snippets=snippets)

    async def save_title(title: str, usage: list[UsageRecord]) -> None:
        await db_async(do_set_title)(session, title)
        await store.record_usage(usage)

    async def remember(fact: str, run_ctx: RunContext) -> str:
        await db_async(_remember)(session, fact)
        return f"Noted. I'll remember: {fact}"

    middleware = run_middleware(agent)
    if on_ready is not None:
        on_ready()
    # Every LLM call of this run (titles, compaction, sub-agents too) is charged to
    # its tenant, user and agent budgets (agents.budgets).
    api_key_id, routine_id = await db_async(run_origin)(run_id) if run_id else (None, None)
    charge = charge_for_run(
        tenant_id=session.tenant_id,
        user_id=session.user_id,
        agent_id=agent.agent_id,
        run_id=run_id,
        api_key_id=api_key_id,
        routine_id=routine_id,
    )
    # O1: every usage row of the run names it, its API key and its routine.
    store.binding = dataclasses.replace(
        store.binding,
        run_id=int(run_id) if run_id.isdigit() else None,
        api_key_id=api_key_id,
        routine_id=routine_id,
    )
    try:
        with charging(charge):
            if resume:
                result = await resume_turn(
                    model=model_spec(model_cfg),
                    tools=tools,
                    store=store,
                    ctx=ctx,
                    prompt=prompt,
                    approvals=approvals,
                    config=turn_config(
                        agent,
                        model_cfg,
                        stream=stream,
                        events=events,
                        prompt_mode=prompt_mode_for(session.channel),
                    ),
                    events=events,
                    hooks=hooks,
                    cheap_model=cheap,
                    middleware=middleware,
                )
            else:
                images = await db_async(turn_images)(turn.pk, turn.tenant_id)
                result = await run_turn(
                    text,
                    images=images,
                    model=model_spec(model_cfg),
                    tools=tools,
                    store=store,
                    ctx=ctx,
                    prompt=prompt,
                    config=turn_config(
                        agent,
                        model_cfg,
                        stream=stream,
                        events=events,
                        prompt_mode=prompt_mode_for(session.channel),
                    ),
                    events=events,
                    hooks=hooks,
                    cheap_model=cheap,
                    remember=remember,
                    save_title=save_title if not session.title else None,
                    middleware=middleware,
                    title_model=title_model,
                    listen_only=session.is_group and not addresses_agent(text, agent),
                )
    except BaseException as exc:
        # The engine turns provider faults into a failed TurnResult; a bug that
        # still escapes must not leave the turn "running". A lost database is not
        # the turn's failure, nor is a worker stopping (its task is cancelled): the
        # run resumes from its last step.
        if not (is_database_outage(exc) or isinstance(exc, asyncio.CancelledError)):
            await db_async(do_finish_turn)(turn, status="failed", error=readable_failure(exc))
        raise
    await db_async(do_finish_turn)(turn, status=result.status, text=result.text, error=result.error or "")
    return ChatReply(result.text, result.status, turn=result, turn_id=turn.pk, notices=list(result.notices))


def run_middleware(agent: ResolvedAgent) -> list[Any]:
    """The middleware the agent's settings install (E25). The cost cap is the
    budgets' (not installed here)."""
    middleware: list[Any] = []
    if agent.auto_compact_tokens:
        middleware.append(AutoCompactMiddleware(agent.auto_compact_tokens))
    if agent.stop_after_tokens:
        middleware.append(StopMiddleware(agent.stop_after_tokens))
    return middleware


def _start_turn(session: Session, text: str) -> Turn:
    with tenant_context(session.tenant_id):
        return do_start_turn(session, text)


def _binding(session: Session, turn: Turn) -> TurnBinding:
    return TurnBinding(
        tenant_id=session.tenant_id,
        session_id=session.pk,
        thread_id=turn.thread_id,
        turn_id=turn.pk,
        agent_id=session.agent_id,
        user_id=session.user_id,
    )


def _remember(session: Session, fact: str) -> None:
    """E24 without an LLM call: the fact goes to the user's MEMORY.md (M3)."""
    with tenant_context(session.tenant_id):
        existing = (
            AgentFile._base_manager.filter(agent_id=session.agent_id, user=session.user, name="MEMORY.md")
            .values_list("content", flat=True)
            .first()
        ) or ""
        line = f"- {fact.strip()}"
        content = (existing.rstrip() + "\n" + line).strip() if existing else line
        do_save_agent_file(
            session.agent, "MEMORY.md", content[-20_000:], user=session.user, acting_user=session.user
        )


# -------------------------------------------------------------------- commands


async def _run_command(
    command: SlashCommand, session: Session, agent: ResolvedAgent, tools_factory: ToolsFactory
) -> ChatReply:
    if command.error:
        return ChatReply(command.error, "failed", command=command.name)
    handler = _COMMANDS.get(command.name)
    if handler is None:
        return ChatReply(f"/{command.name} is not available here.", "completed", command=command.name)
    text = await handler(command, session, agent, tools_factory)
    return ChatReply(text, "completed", command=command.name)


async def _help(*_: Any) -> str:
    return HELP_TEXT


async def _ping(*_: Any) -> str:
    return "pong"


async def _version(*_: Any) -> str:
    return f"Claw Platform {VERSION}"


async def _new(command: SlashCommand, session: Session, *_: Any) -> str:
    thread = await db_async(do_new_thread)(session)
    return f"Started a new conversation thread ({str(thread.pk)[:8]})."


async def _switch(command: SlashCommand, session: Session, *_: Any) -> str:
    thread = await db_async(do_switch_thread)(session, command.args)
    return (
        f"Switched to thread {command.args[:8]}." if thread else f"No thread {command.args} in this session."
    )


async def _undo(command: SlashCommand, session: Session, *_: Any) -> str:
    number = await db_async(do_undo)(session)
    return "Undid the last turn." if number else "Nothing to undo."


async def _redo(command: SlashCommand, session: Session, *_: Any) -> str:
    number = await db_async(do_redo)(session)
    return "Redid the turn." if number else "Nothing to redo."


async def _models(command: SlashCommand, session: Session, agent: ResolvedAgent, *_: Any) -> str:
    models = await db_async(tenant_models)(session.tenant_id)
    current = await db_async(_session_model)(session, agent)
    lines = [
        f"{'*' if m.profile_id == current.profile_id else ' '} {m.provider_name}:{m.model}"
        + (f" ({m.label})" if m.label else "")
        for m in models
    ]
    return "Models (* = in use):\n" + "\n".join(lines)


async def _model(command: SlashCommand, session: Session, agent: ResolvedAgent, *_: Any) -> str:
    current = await db_async(_session_model)(session, agent)
    if not command.args:
        return (
            f"Model: {current.provider_name}:{current.model}. Switch with /model <name>; list with /models."
        )
    wanted = command.args.strip()
    if wanted.lower() in {"default", "reset"}:
        await db_async(_set_override)(session, None)
        return f"Back to the agent's model {agent.model.provider_name}:{agent.model.model}."
    models = await db_async(tenant_models)(session.tenant_id)
    match = next((m for m in models if wanted in {m.model, f"{m.provider_name}:{m.model}", m.label}), None)
    if match is None:
        return f"No model {wanted!r}. Available: " + ", ".join(f"{m.provider_name}:{m.model}" for m in models)
    await db_async(_set_override)(session, match.profile_id)
    return f"Switched this session to {match.provider_name}:{match.model}."


def _set_override(session: Session, profile_id: int | None) -> None:
    Session._base_manager.filter(pk=session.pk).update(model_override_id=profile_id)
    session.model_override_id = profile_id


async def _status(command: SlashCommand, session: Session, agent: ResolvedAgent, *_: Any) -> str:
    def read() -> tuple[Session, int]:
        fresh = Session._base_manager.get(pk=session.pk)
        messages = Message._base_manager.filter(thread=fresh.active_thread, state="active").count()
        return fresh, messages

    fresh, messages = await db_async(read)()
    model = await db_async(_session_model)(fresh, agent)
    return (
        f"Agent: {agent.name} ({agent.slug})\nModel: {model.provider_name}:{model.model}\n"
        f"Session: {fresh.pk}\nThread: {fresh.active_thread_id}\nMessages in context: {messages}\n"
        f"Tokens: {fresh.input_tokens} in / {fresh.output_tokens} out\nCost: ${fresh.cost:.4f}"
    )


async def _tools(
    command: SlashCommand, session: Session, agent: ResolvedAgent, tools_factory: ToolsFactory
) -> str:
    tools = await tools_factory(agent, session)
    await close_tools(tools)
    names = [d.name for d in tools.definitions()]
    return "Tools: " + (", ".join(names) if names else "none")


async def _compact(
    command: SlashCommand, session: Session, agent: ResolvedAgent, tools_factory: ToolsFactory
) -> str:
    turn = await db_async(_start_turn)(session, command.raw)
    store = DjangoRunStore(_binding(session, turn))
    model_cfg = await db_async(_session_model)(session, agent)
    tools = await tools_factory(agent, session)
    ctx = RunContext(
        tenant_id=str(session.tenant_id),
        user_id=str(session.user_id or ""),
        agent_id=str(agent.agent_id),
        session_id=str(session.pk),
    )
    try:
        with charging(
            charge_for_run(tenant_id=session.tenant_id, user_id=session.user_id, agent_id=agent.agent_id)
        ):
            result = await compact_session(
                model=model_spec(model_cfg),
                tools=tools,
                store=store,
                ctx=ctx,
                prompt=prompt_context(agent, session, tools, model_cfg, first_run=False),
                config=turn_config(agent, model_cfg),
                cheap_model=model_spec(agent.light_summary_model) if agent.light_summary_model else None,
                strategy="summarize",
            )
    finally:
        await close_tools(tools)
    if result.error:
        text = f"Compaction failed, history kept as it was: {result.error}"
    elif not result.compacted:
        text = "Nothing to compact yet."
    else:
        text = f"Compacted {len(result.removed)} messages into a summary ({result.strategy})."
    await db_async(do_finish_turn)(turn, status="completed", text=text)
    return text


async def _heartbeat(
    command: SlashCommand, session: Session, agent: ResolvedAgent, tools_factory: ToolsFactory
) -> str:
    from agents.routines.heartbeat import run_heartbeat

    model_cfg = await db_async(_session_model)(session, agent)
    return await run_heartbeat(session, agent, model_cfg)


_COMMANDS: dict[str, Callable[..., Awaitable[str]]] = {
    "help": _help,
    "ping": _ping,
    "version": _version,
    "new": _new,
    "clear": clear_command,
    "skills": skills_command,
    "agent": agent_command,
    "thread": _switch,
    "resume": _switch,
    "undo": _undo,
    "redo": _redo,
    "model": _model,
    "models": _models,
    "status": _status,
    "tools": _tools,
    "compact": _compact,
    "summarize": _compact,
    "heartbeat": _heartbeat,
}
