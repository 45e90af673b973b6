"""`claw chat`: a terminal chat with a configured agent.

Streams tokens as they arrive and shows tool calls; Ctrl+C stops a reply (/stop),
Ctrl+C or Ctrl+D at the prompt leaves. `--base-url` (with `--model`, `--api-key`)
points the tenant's `assistant` agent at any OpenAI-compatible server first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

DIM, BOLD, RED, RESET = "\033[2m", "\033[1m", "\033[31m", "\033[0m"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("chat", help="chat with an agent in the terminal")
    parser.add_argument("--agent", default="", help="agent slug (default: assistant, else the first agent)")
    parser.add_argument("--tenant", default="", help="tenant slug (default: your only or first tenant)")
    parser.add_argument("--user", default="", help="username to chat as (default: the tenant's owner)")
    parser.add_argument(
        "--base-url", default="", help="an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1"
    )
    parser.add_argument("--model", default="", help="model id on --base-url")
    parser.add_argument("--api-key", default="", help="API key for --base-url (default: $OPENAI_API_KEY)")
    parser.add_argument("--no-stream", action="store_true", help="ask the provider for whole replies")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from claw_platform.cli.environment import prepare_environment

    database = prepare_environment()
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        try:
            session_id, agent_name = _open_session(args)
        except LookupError as exc:
            print(f"claw chat: {exc}", file=sys.stderr)
            return 1
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        from agents.models import Session
        from claw_platform.tenancy.context import tenant_context

        # The conversation acts in its own tenant, not under the command's system bypass.
        tenant_id = Session._base_manager.filter(pk=session_id).values_list("tenant_id", flat=True).get()
        with tenant_context(tenant_id):
            asyncio.run(_repl(session_id, agent_name, stream=not args.no_stream, color=color))
        return 0
    finally:
        if database is not None and database.started_here:
            database.stop()


def _open_session(args: argparse.Namespace) -> tuple[Any, str]:
    from django.contrib.auth import get_user_model

    from agents.actions.conversation import do_create_session
    from agents.actions.provisioning import ProviderSpec, ensure_default_agent, provider_from_env
    from agents.models import Agent, ProviderKind
    from claw_platform.tenancy.models import Membership, Role, Tenant

    tenants = Tenant.objects.filter(is_active=True).order_by("pk")
    tenant = tenants.filter(slug=args.tenant).first() if args.tenant else tenants.first()
    if tenant is None:
        raise LookupError("no tenant: run `claw up` once, or pass --tenant")
    if args.user:
        user = get_user_model().objects.filter(username=args.user).first()
        if user is None or not Membership.objects.unscoped().filter(tenant=tenant, user=user).exists():
            raise LookupError(f"{args.user!r} is not a member of {tenant.slug}")
    else:
        owner = Membership.objects.unscoped().filter(tenant=tenant, role=Role.OWNER).order_by("pk").first()
        user = owner.user if owner else None

    if args.base_url:
        spec = ProviderSpec(
            "cli",
            ProviderKind.OPENAI_COMPATIBLE,
            args.base_url,
            args.api_key or os.environ.get("OPENAI_API_KEY", ""),
            args.model or "default",
        )
        agent = _point_assistant_at(tenant, spec)
    else:
        spec_env = provider_from_env(os.environ)
        if spec_env is not None:
            ensure_default_agent(tenant, spec_env)
        agents = Agent.objects.unscoped().filter(tenant=tenant, enabled=True)
        slug = args.agent or "assistant"
        agent = agents.filter(slug=slug).first() or (None if args.agent else agents.order_by("pk").first())
        if agent is None:
            raise LookupError(
                f"no agent {slug!r} in {tenant.slug}: create one in the admin, set ANTHROPIC_API_KEY or "
                "OPENAI_BASE_URL, or pass --base-url and --model"
            )
    from django.utils import timezone

    # Terminal sessions are named by time; generated titles serve the web's session list.
    session = do_create_session(
        agent, user=user, channel="cli", title=f"Terminal chat {timezone.localtime():%Y-%m-%d %H:%M}"
    )
    return session.pk, agent.name


def _point_assistant_at(tenant: Any, spec: Any) -> Any:
    from agents.actions.config import do_create_model_profile, do_create_provider
    from agents.actions.provisioning import ensure_default_agent
    from agents.models import Agent, LLMProvider, ModelProfile

    provider = LLMProvider.objects.unscoped().filter(tenant=tenant, name="cli").first()
    if provider is None:
        provider = do_create_provider(
            tenant, name="cli", kind=spec.kind, base_url=spec.base_url, api_key=spec.api_key
        )
    elif provider.base_url != spec.base_url or (spec.api_key and provider.api_key != spec.api_key):
        provider.base_url = spec.base_url
        provider.api_key = spec.api_key or provider.api_key
        provider.save()
    profile = (
        ModelProfile.objects.unscoped().filter(tenant=tenant, provider=provider, model=spec.model).first()
    )
    if profile is None:
        profile = do_create_model_profile(provider, model=spec.model)
    agent = ensure_default_agent(tenant, spec)
    if agent.model_id != profile.pk:
        agent = Agent.objects.unscoped().get(pk=agent.pk)
        agent.model = profile
        agent.save()
    return agent


class TerminalSink:
    """Prints run events as they come: tokens inline, tool calls on their own lines."""

    def __init__(self, color: bool) -> None:
        self.color = color
        self.at_line_start = True

    def _style(self, text: str, style: str) -> str:
        return f"{style}{text}{RESET}" if self.color else text

    def _line(self, text: str) -> None:
        if not self.at_line_start:
            sys.stdout.write("\n")
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        self.at_line_start = True

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        if event_type == "chunk":
            text = payload.get("text", "")
            sys.stdout.write(text)
            sys.stdout.flush()
            self.at_line_start = text.endswith("\n")
        elif event_type == "thinking":
            sys.stdout.write(self._style(payload.get("text", ""), DIM))
            sys.stdout.flush()
            self.at_line_start = False
        elif event_type == "tool.call":
            args = json.dumps(payload.get("arguments", {}), ensure_ascii=False)[:200]
            self._line(self._style(f"⚙ {payload.get('name')}({args})", BOLD))
        elif event_type == "tool.result":
            mark = "✗" if payload.get("is_error") else "↳"
            preview = str(payload.get("preview", "")).replace("\n", " ")[:200]
            style = RED if payload.get("is_error") else DIM
            self._line(self._style(f"  {mark} {preview}", style))
        elif event_type == "approval_needed":
            self._line(self._style("approval needed: approve it in the web UI or the API", BOLD))


async def _repl(session_id: Any, agent_name: str, *, stream: bool, color: bool) -> None:
    from agents.engine.interfaces import CancelToken
    from agents.runtime.chat import handle_message
    from agents.runtime.llm import close_providers

    loop = asyncio.get_running_loop()
    print(f"Chatting with {agent_name}. /help for commands; Ctrl+C stops a reply; Ctrl+D leaves.")
    try:
        while True:
            try:
                text = await loop.run_in_executor(None, input, "you> ")
            except (EOFError, KeyboardInterrupt):
                print()
                return
            if not text.strip():
                continue
            if text.strip() in {"/quit", "/exit"}:
                return
            token = CancelToken()
            sink = TerminalSink(color)
            loop.add_signal_handler(signal.SIGINT, token.cancel, "stopped by user")
            try:
                reply = await handle_message(session_id, text, events=sink, cancel=token, stream=stream)
            finally:
                loop.remove_signal_handler(signal.SIGINT)
            _print_reply(reply, sink, streamed=stream)
    finally:
        await close_providers()


def _print_reply(reply: Any, sink: TerminalSink, *, streamed: bool) -> None:
    if reply.command is not None or not streamed or reply.status != "completed":
        if reply.status == "failed" and reply.turn is not None and reply.turn.error:
            sink._line(sink._style(f"error: {reply.turn.error}", RED))
        elif reply.status == "cancelled":
            sink._line(sink._style("(stopped)", DIM))
        elif reply.text and (reply.command is not None or not streamed):
            sink._line(reply.text)
    if not sink.at_line_start:
        sys.stdout.write("\n")
    if reply.turn is not None and reply.turn.usage.total_tokens:
        cost = f", ${reply.turn.cost:.4f}" if reply.turn.cost else ""
        sink._line(
            sink._style(
                f"[{reply.turn.usage.input_tokens} in / {reply.turn.usage.output_tokens} out{cost}]", DIM
            )
        )
