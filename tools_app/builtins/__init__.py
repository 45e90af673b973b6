"""Built-in tools, registered into :data:`tools_app.registry.builtin_registry` by
``ToolsAppConfig.ready()``.

T2 workspace tools (bash, read_file, write_file, edit_file, list_dir, glob, grep),
T4 memory tools, T5 time and arithmetic, T6 scheduling, T7 todos, T8 send_message
and export_chat, send_file (to a chat platform, ``channels_app.tools``), E20 sub_agent. Risk levels (T12): bash high; writes, memory
changes, scheduling and messages medium; reads low.
"""

from __future__ import annotations

from channels_app.tools import SendFileTool
from tools_app.builtins.bash import BashTool
from tools_app.builtins.calculate import CalculateTool
from tools_app.builtins.delegate import DelegateTool
from tools_app.builtins.files import (
    EditFileTool,
    GlobTool,
    GrepTool,
    ListDirTool,
    ReadFileTool,
    WriteFileTool,
)
from tools_app.builtins.memory import MemoryDeleteTool, MemorySearchTool, MemoryUpdateTool, MemoryWriteTool
from tools_app.builtins.messaging import ExportChatTool, SendMessageTool
from tools_app.builtins.schedule import (
    CancelScheduledTaskTool,
    ListScheduledTasksTool,
    PauseScheduledTaskTool,
    ResumeScheduledTaskTool,
    RunScheduledTaskTool,
    ScheduledTaskRunsTool,
    ScheduleTaskTool,
    UpdateScheduledTaskTool,
)
from tools_app.builtins.sub_agent import SubAgentTool
from tools_app.builtins.time_tools import CompareTimeTool, GetCurrentTimeTool
from tools_app.builtins.todo import TodoReadTool, TodoWriteTool
from tools_app.registry import Registry, Tool

# One instance each: registering the same instance again is a no-op, so ready()
# running twice (it can, in tests) is harmless.
BUILTIN_TOOLS: tuple[Tool, ...] = (
    GetCurrentTimeTool(),
    CompareTimeTool(),
    CalculateTool(),
    BashTool(),
    ReadFileTool(),
    WriteFileTool(),
    EditFileTool(),
    ListDirTool(),
    GlobTool(),
    GrepTool(),
    MemoryWriteTool(),
    MemorySearchTool(),
    MemoryUpdateTool(),
    MemoryDeleteTool(),
    ScheduleTaskTool(),
    UpdateScheduledTaskTool(),
    ListScheduledTasksTool(),
    ScheduledTaskRunsTool(),
    PauseScheduledTaskTool(),
    ResumeScheduledTaskTool(),
    CancelScheduledTaskTool(),
    RunScheduledTaskTool(),
    TodoReadTool(),
    TodoWriteTool(),
    SendMessageTool(),
    ExportChatTool(),
    SendFileTool(),
    SubAgentTool(),
    DelegateTool(),
)


def register_builtins(registry: Registry) -> None:
    """Register every built-in tool into ``registry``."""
    for tool in BUILTIN_TOOLS:
        registry.register(tool)


__all__ = ["BUILTIN_TOOLS", "CalculateTool", "CompareTimeTool", "GetCurrentTimeTool", "register_builtins"]
