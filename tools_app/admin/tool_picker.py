"""The tool picker of an agent's allow and deny lists (issue 26 item 9): the tools the
registry knows -- built-ins, the tenant's HTTP tools, each MCP server's tools (as
``mcp_<server>_*`` and, where this process has listed them, by name) and the skill
tools -- as checkboxes, plus a box for other names and patterns.

The field stays the model's text (one entry per line, checked by
``validate_name_list``): the widget joins the ticked names and the other entries, so
a post of the plain text (an API client, an older form) still means the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django import forms
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools_app.models import HttpTool, McpServer
from tools_app.models.config import parse_name_list

Choices = list[tuple[str, list[tuple[str, str]]]]
SKILL_TOOLS = ("activate_skill", "search_skills")


def tool_choices(tenant_id: int | None) -> Choices:
    """The registry's tool names for a tenant, grouped for the picker."""
    from tools_app.mcp.toolset import cached_tool_names
    from tools_app.registry import builtin_registry

    groups: Choices = [("Built-in", [(name, name) for name in sorted(builtin_registry.names())])]
    groups.append(("Skills", [(name, name) for name in SKILL_TOOLS]))
    if tenant_id is None:
        return groups
    http = HttpTool._base_manager.filter(tenant_id=tenant_id).order_by("name").values_list("name", flat=True)
    if http:
        groups.append(("HTTP tools", [(name, name) for name in http]))
    mcp: list[tuple[str, str]] = []
    for server_id, name in (
        McpServer._base_manager.filter(tenant_id=tenant_id).order_by("name").values_list("id", "name")
    ):
        every = f"mcp_{name}_*"[:64]
        mcp.append((every, f"{every} (every tool of {name})"))
        mcp.extend((tool, tool) for tool in cached_tool_names(server_id, name))
    if mcp:
        groups.append(("MCP servers", mcp))
    return groups


class ToolPickerWidget(forms.Widget):
    """Checkboxes for the known tool names and a text box for anything else."""

    def __init__(self, choices: Choices, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices = choices
        self.known = {value for _group, options in choices for value, _label in options}

    def value_from_datadict(self, data: Mapping[str, Any], files: Any, name: str) -> str:
        getlist = getattr(data, "getlist", None)
        picked: Sequence[str] = getlist(name) if getlist is not None else [data.get(name) or ""]
        entries = [*picked, str(data.get(f"{name}_other") or "")]
        return "\n".join(e for entry in entries for e in parse_name_list(entry))

    def value_omitted_from_data(self, data: Mapping[str, Any], files: Any, name: str) -> bool:
        return False  # no box ticked is an empty list, as with any checkboxes

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        entries = parse_name_list(value if isinstance(value, str) else "")
        picked = [e for e in entries if e in self.known]
        other = [e for e in entries if e not in self.known]
        element_id = (attrs or {}).get("id") or f"id_{name}"
        boxes = forms.CheckboxSelectMultiple(choices=self.choices).render(
            name, picked, attrs={"id": element_id, "class": "tool-picker-choices"}, renderer=renderer
        )
        text = forms.Textarea(attrs={"rows": 2, "cols": 50}).render(
            f"{name}_other",
            "\n".join(other),
            attrs={"id": f"{element_id}_other", "placeholder": "e.g. mcp_github_* or a tool added later"},
            renderer=renderer,
        )
        return format_html(
            '<div class="tool-picker">{}<label for="{}_other">Other names or patterns (one per line)</label>{}'
            "</div>",
            boxes,
            element_id,
            text,
        )
