from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "claw_platform.tenancy"
    label = "tenancy"
    verbose_name = "Tenants and members"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model

        from claw_platform.secret_fields import declare_secret

        # A password hash is a secret like any other (claw_platform.secret_fields).
        declare_secret(get_user_model(), "password")
