"""What the operator allows the shell (T15, issue 21): the cap over every tenant's
choice.

A tenant admin picks, per agent, where ``bash`` runs (``ToolSetting.execution``)
and whether it has network (``AgentToolConfig.shell_network``). Neither reaches
beyond what the operator set in the environment:

- ``CLAW_SHELL_HOST=allow`` lets commands run on the host (confined by Landlock
  only, which does not hide the product's sockets); by default they run only in
  the bubblewrap sandbox, and are refused where it does not work;
- ``CLAW_SHELL_NETWORK=allow`` lets sandboxed commands have a network (their own
  namespace, see :mod:`tools_app.sandbox.network`); by default they have none.

The admin refuses a choice beyond the cap (the models' ``clean``), and the run
applies the cap again to rows saved before the operator changed a setting.
"""

from __future__ import annotations

from django.conf import settings

HOST_SETTING = "CLAW_SHELL_HOST"
NETWORK_SETTING = "CLAW_SHELL_NETWORK"
ALLOW = "allow"


def host_shell_allowed() -> bool:
    return bool(getattr(settings, HOST_SETTING, "refuse") == ALLOW)


def shell_network_allowed() -> bool:
    return bool(getattr(settings, NETWORK_SETTING, "refuse") == ALLOW)


def capped_execution(execution: str) -> str:
    """``host`` / ``sandbox`` / ``either`` as the operator lets it run: without
    ``CLAW_SHELL_HOST=allow`` everything is ``sandbox``."""
    wanted = execution or "either"
    if host_shell_allowed():
        return wanted
    return "sandbox"


def capped_network(requested: bool) -> bool:
    return bool(requested) and shell_network_allowed()


HOST_REFUSED = (
    f"Running shell commands on the host is not allowed on this installation ({HOST_SETTING}); "
    "choose the sandbox."
)
NETWORK_REFUSED = (
    f"Shell commands with network are not allowed on this installation ({NETWORK_SETTING}); leave this off."
)
