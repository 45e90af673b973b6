"""Skills as tools (T9): ``activate_skill`` loads one; ``search_skills`` finds one.

The prompt lists the agent's skills (name and description) when there are few
(``agents.engine.prompt.INLINE_LIST_MAX``); beyond that it tells the model to search,
and ``search_skills`` ranks them with PostgreSQL full-text search over name,
description and body. Either way only the skills of this tenant that apply to this
agent are found or loaded: the catalogue the tools hold is already filtered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import Q

from agents.engine.interfaces import READ_ONLY, RunContext
from agents.engine.prompt import INLINE_LIST_MAX, SkillSummary
from claw_platform.db import db_async
from tools_app.registry import TOOL_ERROR, Tool, ToolError

MAX_SEARCH_RESULTS = 10


@dataclass(frozen=True, slots=True)
class SkillSpec:
    """A skill's catalogue entry (the body stays in the database until activated)."""

    id: int
    name: str
    description: str
    agent_ids: frozenset[int] | None = None

    def applies_to(self, agent_id: int) -> bool:
        return self.agent_ids is None or agent_id in self.agent_ids

    @property
    def summary(self) -> SkillSummary:
        return SkillSummary(self.name, self.description)


def _load_body(skill_id: int) -> str | None:
    from tools_app.models import Skill

    return Skill._base_manager.filter(pk=skill_id, enabled=True).values_list("body", flat=True).first()


def _search(ids: list[int], query: str, limit: int) -> list[tuple[str, str]]:
    from tools_app.models import Skill

    skills = Skill._base_manager.filter(pk__in=ids, enabled=True)
    vector = (
        SearchVector("name", weight="A")
        + SearchVector("description", weight="B")
        + SearchVector("body", weight="D")
    )
    terms = SearchQuery(query, search_type="websearch")
    ranked = (
        skills.annotate(document=vector, rank=SearchRank(vector, terms))
        .filter(document=terms)
        .order_by("-rank", "name")
        .values_list("name", "description")[:limit]
    )
    found = list(ranked)
    if not found:
        words = [w for w in query.split() if len(w) > 2][:5]
        condition = Q()
        for word in words:
            condition |= Q(name__icontains=word) | Q(description__icontains=word)
        if words:
            found = list(skills.filter(condition).order_by("name").values_list("name", "description")[:limit])
    return found


class ActivateSkillTool(Tool):
    name = "activate_skill"
    description = (
        "Load a skill by name: returns its instructions (SKILL.md), which you then follow. "
        "Use it when the task matches a skill from the catalogue or from search_skills."
    )
    input_schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}},
        "required": ["name"],
        "additionalProperties": False,
    }
    traits = READ_ONLY

    def __init__(self, catalogue: Sequence[SkillSpec]) -> None:
        self.catalogue = {skill.name: skill for skill in catalogue}

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        name = str(args["name"]).strip()
        skill = self.catalogue.get(name)
        if skill is None:
            hint = (
                "Use search_skills to find one."
                if len(self.catalogue) > INLINE_LIST_MAX
                else "Available: " + ", ".join(sorted(self.catalogue)) + "."
            )
            raise ToolError(TOOL_ERROR, f"There is no skill named {name!r}. {hint}")
        body = await db_async(_load_body)(skill.id)
        if body is None:
            raise ToolError(TOOL_ERROR, f"The skill {name!r} is no longer available.")
        return (
            f'<skill name="{skill.name}">\n{body}\n</skill>\nFollow these instructions for the task at hand.'
        )


class SearchSkillsTool(Tool):
    name = "search_skills"
    description = (
        "Find skills that fit a task: returns the best matches (name: description). Then activate_skill."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 500},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    traits = READ_ONLY

    def __init__(self, catalogue: Sequence[SkillSpec]) -> None:
        self.ids = [skill.id for skill in catalogue]

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        limit = int(args.get("limit") or 5)
        found = await db_async(_search)(self.ids, str(args["query"]), limit)
        if not found:
            return "No skill matches. Try other words, or carry on without a skill."
        return "\n".join(f"- {name}: {description}" for name, description in found)


class SkillToolSet:
    """``activate_skill`` when the agent has skills, plus ``search_skills`` when many."""

    name = "skills"

    def __init__(self, catalogue: Sequence[SkillSpec]) -> None:
        self.catalogue = list(catalogue)
        self._tools: list[Tool] = []
        if self.catalogue:
            self._tools.append(ActivateSkillTool(self.catalogue))
        if len(self.catalogue) > INLINE_LIST_MAX:
            self._tools.append(SearchSkillsTool(self.catalogue))

    def tools(self) -> Sequence[Tool]:
        return self._tools

    @property
    def summaries(self) -> list[SkillSummary]:
        return [skill.summary for skill in self.catalogue]
