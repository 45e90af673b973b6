"""The approval policy (T12): which calls run, which need a person's yes, which are
refused -- plugged into the executor as its ``check_policy`` seam.

Modes (agent-wide, and per tool overriding the agent's):

- ``auto``: run without asking.
- ``ask``: agent-wide, calls whose risk is at or above the agent's approval risk need
  approval; set on one tool, every call of it does.
- ``deny``: agent-wide, calls at or above the approval risk are refused (for agents
  nobody watches); set on one tool, the tool is not offered at all.
- ``read_only``: only tools that change nothing are offered; a shell tool stays, but
  runs only simple read-only commands (``ls``, ``cat``, ``grep`` ...).

A call's risk is the tool's (bash high; writes and messages medium; reads low),
or the per-tool override; a shell command that is not simple (chaining, pipes,
substitution, redirects, wrappers such as ``env``/``sudo``/``busybox sh -c``/
``xargs``; see :mod:`tools_app.policy.shell_risk`) is **high** whatever was set.

A shell call that runs a workspace script (``bash x.sh``, ``./x``, ``python3 x.py``
...; :mod:`tools_app.policy.scripts`) is rated by the script too: a shell script by
the same rules as a command, any other script -- and one that is missing or cannot
be read -- high. Its approval request shows the script and any decoded arguments
(the decision's ``details``), and the approval is bound to the script's digest.

"Always" (for the session): a grant covers one tool with one exact set of arguments,
compared by the digest of their canonical JSON (and of the scripts the call runs),
so an approval of ``ls`` never covers ``ls; rm -rf x``, nor one of ``bash x.sh``
a changed ``x.sh``. Grants turn "needs approval" into "allow"; they never override
a refusal.

What was checked is what runs: :meth:`ApprovalPolicy.recheck`, just before a call
runs, reads its scripts again; one changed since the check (say by a ``write_file``
earlier in the same step) is not run unless the policy would still let it run
without asking, and never when a person approved the older text.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.engine.interfaces import PolicyDecision, RunContext
from agents.engine.types import ToolCallPart
from tools_app.policy.scripts import CommandInsight, inspect_command
from tools_app.policy.shell_risk import classify_command
from tools_app.registry import Tool

RISK_ORDER = {"low": 0, "medium": 1, "high": 2}
AUTO, ASK, DENY, READ_ONLY = "auto", "ask", "deny", "read_only"


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a call's arguments (the key of an "always")."""
    return hashlib.sha256(canonical_arguments(arguments).encode()).hexdigest()


def grant_digest(arguments: Mapping[str, Any], scripts_key: list[list[str | None]] | None = None) -> str:
    """The key of an "always": the arguments' digest, and for a call that runs
    workspace scripts, their paths and digests with them."""
    if not scripts_key:
        return arguments_digest(arguments)
    bound = {"arguments": dict(arguments), "scripts": scripts_key}
    return hashlib.sha256(canonical_arguments(bound).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ToolRule:
    """One per-tool setting: ``pattern`` is a name or a shell-style pattern."""

    pattern: str
    approval_mode: str = ""
    risk: str = ""
    execution: str = ""


@dataclass(frozen=True)
class AgentPolicy:
    mode: str = ASK
    approval_risk: str = "high"
    rules: tuple[ToolRule, ...] = ()
    _exact: dict[str, ToolRule] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._exact.update({r.pattern: r for r in self.rules})

    def rule_for(self, name: str) -> ToolRule | None:
        """The exact rule for ``name``, else the most specific matching pattern."""
        exact = self._exact.get(name)
        if exact is not None:
            return exact
        matches = [r for r in self.rules if fnmatch.fnmatchcase(name, r.pattern)]
        return max(matches, key=lambda r: len(r.pattern), default=None)


def shell_command(tool: Tool, arguments: Mapping[str, Any]) -> str | None:
    """The command text of a shell tool's call, ``None`` for other tools."""
    key = getattr(tool, "command_argument", None)
    if not key:
        return None
    value = arguments.get(key)
    return value if isinstance(value, str) else ""


_UNSET: Any = object()


class ApprovalPolicy:
    """The executor's policy for one run: an :class:`AgentPolicy` plus the session's
    "always" grants (``(tool name, grant digest)`` pairs, loaded with the run) and
    the workspace whose scripts shell calls may run."""

    def __init__(
        self, policy: AgentPolicy, grants: Iterable[tuple[str, str]] = (), *, workspace: Path | None = None
    ) -> None:
        self.policy = policy
        self.grants = frozenset(grants)
        self.workspace = workspace
        # Call id -> (the decision's action, the scripts' digests) when it was checked.
        self.checked: dict[str, tuple[str, list[list[str | None]]]] = {}

    def mode_for(self, name: str) -> str:
        rule = self.policy.rule_for(name)
        return (rule.approval_mode if rule is not None else "") or self.policy.mode

    def offered(self, tool: Tool) -> bool:
        """Is the tool offered at all under these modes?"""
        rule = self.policy.rule_for(tool.name)
        if rule is not None and rule.approval_mode == DENY:
            return False
        if self.mode_for(tool.name) == READ_ONLY:
            return tool.traits.read_only or getattr(tool, "command_argument", None) is not None
        return True

    def inspect(self, tool: Tool, arguments: Mapping[str, Any]) -> CommandInsight | None:
        """The scripts a shell call runs and its decoded arguments (None for other tools)."""
        command = shell_command(tool, arguments)
        if command is None:
            return None
        return inspect_command(command, self.workspace)

    def call_risk(
        self, tool: Tool, arguments: Mapping[str, Any], insight: CommandInsight | None = _UNSET
    ) -> tuple[str, str]:
        """The call's risk level and why."""
        rule = self.policy.rule_for(tool.name)
        risk = (rule.risk if rule is not None else "") or tool.traits.risk
        command = shell_command(tool, arguments)
        if command is not None:
            facts = classify_command(command)
            if facts.always_high:
                return "high", facts.reason
            if insight is _UNSET:
                insight = self.inspect(tool, arguments)
            reason = insight.high_risk_reason() if insight is not None else ""
            if reason:
                return "high", reason
        return risk, f"{tool.name} is {risk} risk"

    async def __call__(self, tool: Tool, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        insight = self.inspect(tool, arguments)
        decision = self.decide(tool, arguments, insight=insight)
        if insight is not None and insight.scripts:
            self.checked[call.id] = (decision.action, insight.scripts_key())
        return decision

    def decide(
        self, tool: Tool, arguments: Mapping[str, Any], *, insight: CommandInsight | None = _UNSET
    ) -> PolicyDecision:
        rule = self.policy.rule_for(tool.name)
        tool_mode = rule.approval_mode if rule is not None else ""
        mode = tool_mode or self.policy.mode
        if mode == DENY and tool_mode:
            return PolicyDecision.deny(f"{tool.name} is disabled for this agent.")
        if mode == READ_ONLY:
            return self._read_only(tool, arguments)
        if mode == AUTO:
            return PolicyDecision.allow()
        if insight is _UNSET:
            insight = self.inspect(tool, arguments)
        risk, why = self.call_risk(tool, arguments, insight)
        over = RISK_ORDER.get(risk, 2) >= RISK_ORDER.get(self.policy.approval_risk, 2)
        if mode == DENY:
            if over:
                return PolicyDecision.deny(
                    f"Refused: {why}, and this agent runs {risk}-risk calls only with approval, "
                    "which nobody can give here. Try a safer way."
                )
            return PolicyDecision.allow()
        # ask
        if not (over or tool_mode == ASK):
            return PolicyDecision.allow()
        scripts_key = insight.scripts_key() if insight is not None else None
        if (tool.name, grant_digest(arguments, scripts_key)) in self.grants:
            return PolicyDecision.allow()
        details = insight.details() if insight is not None else {}
        return PolicyDecision.needs_approval(
            f"{why}: a person must approve this call.", details=details or None
        )

    def recheck(self, tool: Tool, call: ToolCallPart) -> str | None:
        """Just before ``call`` runs: why it must not (its scripts changed since it
        was checked), or None. Calls that run no script, or were never checked
        here, pass."""
        seen = self.checked.pop(call.id, None)
        if seen is None:
            return None
        action, key = seen
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        insight = self.inspect(tool, arguments)
        now = insight.scripts_key() if insight is not None else []
        if now == key:
            return None
        before = {path: digest for path, digest in key}
        changed = ", ".join(str(p) for p, d in now if before.get(p, "") != d) or "its scripts"
        if action == "needs_approval":
            return (
                f"Not run: {changed} changed after this call was approved. Call the tool again so "
                "the approval shows what would run now."
            )
        decision = self.decide(tool, arguments, insight=insight)
        if decision.action == "allow":
            return None
        return (
            f"Not run: {changed} changed after this call was checked (another call of this step "
            f"wrote it), and as it is now the policy would not let it run unasked ({decision.reason}) "
            "Call the tool again."
        )

    def _read_only(self, tool: Tool, arguments: Mapping[str, Any]) -> PolicyDecision:
        command = shell_command(tool, arguments)
        if command is not None:
            facts = classify_command(command)
            if facts.simple and facts.read_only:
                return PolicyDecision.allow()
            return PolicyDecision.deny(
                f"Read-only mode: only simple commands that read (ls, cat, grep, find ...) may run; "
                f"this one is not ({facts.reason})."
            )
        if tool.traits.read_only:
            return PolicyDecision.allow()
        return PolicyDecision.deny(f"Read-only mode: {tool.name} changes things and cannot be used.")
