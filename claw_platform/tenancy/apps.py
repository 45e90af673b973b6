from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "claw_platform.tenancy"
    label = "tenancy"
    verbose_name = "Tenants and members"
