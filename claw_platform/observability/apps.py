from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "claw_platform.observability"
    label = "observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from claw_platform.observability.logs import configure_structlog

        configure_structlog()
