from django.apps import AppConfig


class OpsConfig(AppConfig):
    name = "claw_platform.ops"
    label = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Before any connection is made: every connection copies psycopg's adapters.
        from django.db.backends.signals import connection_created

        from claw_platform.outage import connection_made
        from claw_platform.storable import install_storable_dumpers

        install_storable_dumpers()
        # The end of a database outage is the first connection that opens after it.
        connection_created.connect(connection_made, dispatch_uid="claw_outage_end")
        # Every migrate (run as the owner role) grants the runtime role what it needs.
        from django.db.models.signals import post_migrate

        from claw_platform.db_roles import grant_after_migrate

        post_migrate.connect(grant_after_migrate, sender=self, dispatch_uid="claw_runtime_grants")
        # Row-level security on every tenant table, and the tenancy context mirrored
        # into each connection (claw_platform.tenancy.rls).
        from claw_platform.tenancy.rls import apply_after_migrate, install

        post_migrate.connect(apply_after_migrate, sender=self, dispatch_uid="claw_row_level_security")
        connection_created.connect(install, dispatch_uid="claw_rls_setting")
