from __future__ import annotations

from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools, hooks and approvals"

    def ready(self) -> None:
        # Built-ins are registered here, not at import time, so importing a tool
        # module never has side effects (STYLE 8).
        import tools_app.signals  # noqa: F401  (connects the receivers)
        from tools_app.builtins import register_builtins
        from tools_app.registry import builtin_registry
        from tools_app.web import register_web_tools

        register_builtins(builtin_registry)
        register_web_tools(builtin_registry)
