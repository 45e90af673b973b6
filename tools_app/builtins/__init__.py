"""Built-in tools, registered into :data:`tools_app.registry.builtin_registry` by
``ToolsAppConfig.ready()``.

Today: the T5 tools (``get_current_time``, ``compare_time``, ``calculate``), all
read-only and low risk. Workspace, web, memory and scheduling tools join this list.
"""

from __future__ import annotations

from tools_app.builtins.calculate import CalculateTool
from tools_app.builtins.time_tools import CompareTimeTool, GetCurrentTimeTool
from tools_app.registry import Registry, Tool

# One instance each: registering the same instance again is a no-op, so ready()
# running twice (it can, in tests) is harmless.
BUILTIN_TOOLS: tuple[Tool, ...] = (GetCurrentTimeTool(), CompareTimeTool(), CalculateTool())


def register_builtins(registry: Registry) -> None:
    """Register every built-in tool into ``registry``."""
    for tool in BUILTIN_TOOLS:
        registry.register(tool)


__all__ = ["BUILTIN_TOOLS", "CalculateTool", "CompareTimeTool", "GetCurrentTimeTool", "register_builtins"]
