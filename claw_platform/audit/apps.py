from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "claw_platform.audit"
    label = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        from claw_platform.audit import signals  # noqa: F401  (sign-in events)
