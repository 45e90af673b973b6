from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "claw_platform.api"
    label = "api"
    verbose_name = "API keys, webhooks and pairing"

    def ready(self) -> None:
        from claw_platform.api import schema  # noqa: F401  (registers the auth schemes)
        from claw_platform.api.key_cache import connect_signals
        from claw_platform.api.serializers.base import register_secret_serializer_fields

        connect_signals()
        register_secret_serializer_fields()
