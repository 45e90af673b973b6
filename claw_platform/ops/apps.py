from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "claw_platform.ops"
    label = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Before any connection is made: every connection copies psycopg's adapters.
        from claw_platform.storable import install_storable_dumpers

        install_storable_dumpers()
