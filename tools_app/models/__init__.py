"""Tool extensions a tenant configures in the admin: hooks, MCP servers, HTTP tools,
skills, and the allow-list of internal hosts the SSRF guard lets through."""

from tools_app.models.hooks import Hook, HookEvent, HookKind, HookOnError
from tools_app.models.http_tools import HttpMethod, HttpTool
from tools_app.models.mcp import McpServer, McpTransport
from tools_app.models.network import AllowedHost
from tools_app.models.skills import Skill
from tools_app.models.versions import ExtensionsVersion

__all__ = [
    "AllowedHost",
    "ExtensionsVersion",
    "Hook",
    "HookEvent",
    "HookKind",
    "HookOnError",
    "HttpMethod",
    "HttpTool",
    "McpServer",
    "McpTransport",
    "Skill",
]
