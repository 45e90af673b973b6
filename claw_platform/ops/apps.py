from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "claw_platform.ops"
    label = "ops"
    verbose_name = "Operations"
