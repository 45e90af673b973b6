"""How drf-spectacular describes the API's authentication (imported in ``ready``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = "claw_platform.api.auth.ApiKeyAuthentication"
    name = "bearer"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "http", "scheme": "bearer", "description": "An API key: claw_<prefix>_<secret>."}


class LoginSessionScheme(OpenApiAuthenticationExtension):
    target_class = "claw_platform.api.auth.MemberSessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
