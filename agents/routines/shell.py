"""Shell routines (C2, C3, C4): a command run by the scheduler, behind ZeroClaw's gates.

Gates, checked when the routine is saved (a form or API error naming ``command``,
:func:`check_shell_routine`) and again before every run (settings may have changed
since):

- one simple command: no subshells, substitutions, redirects, pipes or chaining
  (``; & | < > ` $ ( )`` and newlines are refused);
- its program is on the allow-list ``CLAW_ROUTINE_SHELL_ALLOWED``; in read-only mode
  (``CLAW_ROUTINE_SHELL_READ_ONLY``) only on ``CLAW_ROUTINE_SHELL_READ_ONLY_ALLOWED``;
- no forbidden path: the shell tool's own check (sensitive names such as ``.ssh`` or
  ``.env``, absolute paths outside the workspace, ``..`` leaving it);
- at most ``CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR`` shell runs per tenant an hour.

A refused command is recorded ``refused`` and never retried. An allowed one runs in
the shell tool's sandbox (bubblewrap; the host only where the operator allows it),
in the workspace of the user the routine acts for, with the routine's timeout.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from datetime import timedelta
from pathlib import PurePosixPath
from types import SimpleNamespace
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agents.models import ActionKind, RoutineRun, RoutineRunStatus
from agents.routines.outcome import finish_routine_run
from tools_app.builtins.bash import MAX_OUTPUT_BYTES, check_command_paths
from tools_app.context import ToolContext
from tools_app.registry import ToolError
from tools_app.sandbox.shell import SANDBOX_HOME, SandboxUnavailable, choose_mode, run_command
from tools_app.workspace import ensure_workspace, workspace_path

FORBIDDEN_SYNTAX = re.compile(r"[;&|<>`$()\n\r\\]")


class Refused(Exception):
    """The command does not pass a gate; never retried."""


def check_shell_command(command: str) -> list[str]:
    """The command's words if it passes the static gates; ``ValidationError`` (for
    forms and the API) naming what is wrong otherwise."""
    text = command.strip()
    if not text:
        raise ValidationError("A shell routine needs a command.")
    if len(text) > 2_000:
        raise ValidationError("The command is over 2,000 characters.")
    bad = FORBIDDEN_SYNTAX.search(text)
    if bad:
        raise ValidationError(
            f"{bad.group()!r} is not allowed: one simple command, without subshells, redirects, pipes or chaining."
        )
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValidationError(f"The command cannot be parsed ({exc}).") from None
    program = PurePosixPath(words[0]).name
    read_only = settings.CLAW_ROUTINE_SHELL_READ_ONLY
    allowed = (
        settings.CLAW_ROUTINE_SHELL_READ_ONLY_ALLOWED if read_only else settings.CLAW_ROUTINE_SHELL_ALLOWED
    )
    if program not in allowed or "/" in words[0]:
        mode = " (read-only mode)" if read_only else ""
        raise ValidationError(
            f"{words[0]!r} is not on the allow-list of shell routines{mode}: {', '.join(sorted(allowed))}."
        )
    return words


def check_shell_routine(command: str) -> list[str]:
    """The gates a shell routine's command passes when it is saved (forms, API): the
    static ones of :func:`check_shell_command` and the forbidden paths, checked as
    the sandbox sees the workspace (``/workspace``); again before every run in the
    mode it runs in."""
    words = check_shell_command(command)
    try:
        _check_paths(command, PurePosixPath(SANDBOX_HOME), "sandbox")
    except Refused as exc:
        raise ValidationError(str(exc)) from None
    return words


def _check_paths(command: str, workspace: Any, mode: str) -> None:
    try:
        check_command_paths(command, cast(ToolContext, SimpleNamespace(workspace=workspace)), mode=mode)
    except ToolError as exc:
        raise Refused(str(exc)) from None


def _over_hourly_limit(row: RoutineRun) -> bool:
    limit = settings.CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR
    recent = (
        RoutineRun._base_manager.filter(
            tenant_id=row.tenant_id,
            routine__action=ActionKind.SHELL,
            started_at__gt=timezone.now() - timedelta(hours=1),
            status__in=(RoutineRunStatus.RUNNING, RoutineRunStatus.OK, RoutineRunStatus.FAILED),
        )
        .exclude(pk=row.pk)
        .count()
    )
    return recent >= limit


def execute_shell_run(row_id: int) -> None:
    """Run a started shell RoutineRun and settle it."""
    row = RoutineRun._base_manager.select_related("routine__agent").get(pk=row_id)
    routine = row.routine
    status, output, reason = RoutineRunStatus.FAILED, "", ""
    try:
        try:
            check_shell_command(routine.command)
        except ValidationError as exc:
            raise Refused("; ".join(exc.messages)) from None
        if _over_hourly_limit(row):
            raise Refused(
                f"over the tenant's limit of {settings.CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR} shell actions an hour"
            )
        try:
            mode = choose_mode("sandbox")
        except SandboxUnavailable as exc:
            raise Refused(str(exc)) from None
        workspace = ensure_workspace(
            workspace_path(
                tenant_id=routine.tenant_id,
                agent_id=routine.agent_id,
                agent_type=routine.agent.agent_type,
                user_id=routine.user_id,
            )
        )
        _check_paths(routine.command, workspace, mode)
        result = asyncio.run(
            run_command(
                routine.command,
                workspace,
                mode=mode,
                time_limit=float(routine.timeout_seconds),
                max_output_bytes=MAX_OUTPUT_BYTES,
            )
        )
        output = result.output
        if result.timed_out:
            reason = f"timed out after {routine.timeout_seconds} s"
        elif result.exit_code == 0:
            status = RoutineRunStatus.OK
        else:
            reason = f"exit code {result.exit_code}"
    except Refused as exc:
        status, reason = RoutineRunStatus.REFUSED, str(exc)
    except SandboxUnavailable as exc:
        status, reason = RoutineRunStatus.REFUSED, str(exc)
    except OSError as exc:
        reason = f"the command could not be started ({type(exc).__name__})"
    with transaction.atomic():
        locked = RoutineRun._base_manager.select_for_update().select_related("routine").get(pk=row_id)
        if locked.status != RoutineRunStatus.RUNNING:
            return  # settled meanwhile (the lost-worker sweep)
        finish_routine_run(locked, status, timezone.now(), output=output, reason=reason)
