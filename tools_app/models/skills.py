"""Skills (T9): instructions an agent loads on demand with activate_skill."""

from __future__ import annotations

from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models

from claw_platform.tenancy.models import TenantOwned
from tools_app.models._common import agents_field

MAX_SKILL_BODY_CHARS = 100_000
SKILL_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Skill(TenantOwned):
    """A SKILL.md: a name and a one-line description go into the prompt's catalogue
    (or are found with search_skills when there are many); the body is loaded only
    when the agent activates the skill."""

    name = models.CharField(
        max_length=64,
        validators=[RegexValidator(SKILL_NAME_RE, "Lower-case letters, digits, - and _ (e.g. pdf-report).")],
    )
    description = models.CharField(max_length=500, help_text="When to use it: the model reads this line.")
    body = models.TextField(
        validators=[MaxLengthValidator(MAX_SKILL_BODY_CHARS)],
        help_text="The SKILL.md content: instructions the agent follows once it activates the skill.",
    )
    enabled = models.BooleanField(default=True)
    agents = agents_field()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="skill_unique_name")]

    def __str__(self) -> str:
        return self.name
