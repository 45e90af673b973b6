from django.contrib.admin.apps import AdminConfig


class ClawAdminConfig(AdminConfig):
    default_site = "claw_platform.admin.site.ClawAdminSite"
