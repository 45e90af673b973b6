from __future__ import annotations

from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "agents.budgets"
    label = "budgets"
    verbose_name = "Budgets and limits"
    default_auto_field = "django.db.models.BigAutoField"
