"""What a tenant configures for tools in the admin: per-agent tool settings and
approvals, hooks, MCP servers, HTTP tools, skills, and the allow-list of internal
hosts the SSRF guard lets through; plus per-session grants and todo lists."""

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
from tools_app.models.health import ToolHealth
from tools_app.models.hooks import Hook, HookEvent, HookKind, HookOnError
from tools_app.models.http_tools import HttpMethod, HttpTool
from tools_app.models.mcp import McpServer, McpTransport
from tools_app.models.network import AllowedHost
from tools_app.models.skills import Skill
from tools_app.models.todos import SessionTodoList
from tools_app.models.user_tokens import UserToken
from tools_app.models.versions import ExtensionsVersion

__all__ = [
    "AgentToolConfig",
    "AllowedHost",
    "ApprovalMode",
    "ExtensionsVersion",
    "Hook",
    "HookEvent",
    "HookKind",
    "HookOnError",
    "HttpMethod",
    "HttpTool",
    "McpServer",
    "McpTransport",
    "Risk",
    "SessionTodoList",
    "ShellExecution",
    "Skill",
    "ToolApprovalGrant",
    "ToolApprovalMode",
    "ToolHealth",
    "ToolSetting",
    "UserToken",
    "parse_name_list",
]
