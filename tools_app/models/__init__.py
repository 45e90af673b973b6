from tools_app.models.approvals import ToolApprovalGrant
from tools_app.models.config import (
    AgentToolConfig,
    ApprovalMode,
    Risk,
    ShellExecution,
    ToolApprovalMode,
    ToolSetting,
    parse_name_list,
)
from tools_app.models.todos import SessionTodoList

__all__ = [
    "AgentToolConfig",
    "ApprovalMode",
    "Risk",
    "SessionTodoList",
    "ShellExecution",
    "ToolApprovalGrant",
    "ToolApprovalMode",
    "ToolSetting",
    "parse_name_list",
]
