"""Snapshot and hydrate (M4, ZeroClaw's MEMORY_SNAPSHOT.md): an agent's core
memories, and optionally one user's, exported as Markdown, and an empty store
filled back from it.

The format is plain Markdown a person can read and edit::

    # MEMORY_SNAPSHOT.md
    <!-- claw memory snapshot v1 -->

    ## Agent
    - The deploy window is Tuesday 10:00-12:00 UTC.

    ## User
    - Prefers green tea.
      A memory of several lines continues indented by two spaces.

Sections: ``## Tenant`` (shared by the whole tenant), ``## Agent`` (the agent's) and
``## User`` (the user's own). Hydrating writes each entry as a core memory of that
scope through the store's checks (length, who may write tenant memory) and only
into an empty store: a snapshot never duplicates what is there.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from agents.memory.store import MemoryError, MemoryOwner, _check_content
from agents.models import MemoryCategory, MemoryEntry, MemoryScope

SNAPSHOT_FILE = "MEMORY_SNAPSHOT.md"
HEADER = "<!-- claw memory snapshot v1 -->"
MAX_SNAPSHOT_CHARS = 2_000_000
MAX_SNAPSHOT_ENTRIES = 5_000
_SECTIONS = {"tenant": MemoryScope.TENANT, "agent": MemoryScope.AGENT, "user": MemoryScope.USER}


def _owned(owner: MemoryOwner, scopes: list[str]) -> Q:
    condition = Q(pk__in=[])
    if MemoryScope.TENANT in scopes:
        condition |= Q(scope=MemoryScope.TENANT)
    if MemoryScope.AGENT in scopes and owner.agent_id is not None:
        condition |= Q(scope=MemoryScope.AGENT, agent_id=owner.agent_id)
    if MemoryScope.USER in scopes and owner.user_id is not None:
        condition |= Q(scope=MemoryScope.USER, user_id=owner.user_id)
    return Q(tenant_id=owner.tenant_id) & condition


def snapshot_markdown(owner: MemoryOwner, *, scopes: list[str] | None = None) -> str:
    """The owner's core memories of ``scopes`` (default: agent and user) as Markdown,
    oldest first."""
    scopes = scopes or [MemoryScope.AGENT, MemoryScope.USER]
    rows = (
        MemoryEntry._base_manager.filter(_owned(owner, scopes), category=MemoryCategory.CORE)
        .order_by("created_at", "pk")
        .values_list("scope", "content")
    )
    by_scope: dict[str, list[str]] = {}
    for scope, content in rows:
        by_scope.setdefault(scope, []).append(content)
    lines = [f"# {SNAPSHOT_FILE}", HEADER]
    for title, scope in _SECTIONS.items():
        if scope not in by_scope:
            continue
        lines += ["", f"## {title.capitalize()}"]
        for content in by_scope[scope]:
            first, *rest = content.strip().splitlines() or [""]
            lines.append(f"- {first}")
            lines.extend(f"  {line}" if line else "" for line in rest)
    return "\n".join(lines) + "\n"


def parse_snapshot(text: str) -> list[tuple[str, str]]:
    """(scope, content) of each entry of a snapshot; MemoryError if it is not one."""
    if len(text) > MAX_SNAPSHOT_CHARS:
        raise MemoryError(f"A memory snapshot is at most {MAX_SNAPSHOT_CHARS:,} characters.")
    if HEADER not in text:
        raise MemoryError(f"This is not a memory snapshot (the line {HEADER} is missing).")
    entries: list[tuple[str, list[str]]] = []
    scope: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            title = line[3:].strip().lower()
            if title not in _SECTIONS:
                raise MemoryError(
                    f"Line {number}: unknown section {line[3:].strip()!r} (Tenant, Agent or User)."
                )
            scope = _SECTIONS[title]
        elif line.startswith("- "):
            if scope is None:
                raise MemoryError(f"Line {number}: an entry before any section.")
            entries.append((scope, [line[2:]]))
        elif line.startswith("  ") and entries:
            entries[-1][1].append(line[2:])
        elif line == "" and entries and scope is not None:
            entries[-1][1].append("")
    if len(entries) > MAX_SNAPSHOT_ENTRIES:
        raise MemoryError(f"A memory snapshot holds at most {MAX_SNAPSHOT_ENTRIES:,} entries.")
    return [(s, "\n".join(body).strip()) for s, body in entries if "\n".join(body).strip()]


@transaction.atomic
def hydrate(owner: MemoryOwner, text: str) -> int:
    """Write a snapshot's entries as core memories of ``owner``; the count written.
    Refused when the owner already has memories of a scope the snapshot holds."""
    from agents.memory.store import default_memory_store

    entries = parse_snapshot(text)
    scopes = sorted({scope for scope, _ in entries})
    if scopes and MemoryEntry._base_manager.filter(_owned(owner, scopes)).exists():
        raise MemoryError("This memory store is not empty: a snapshot only fills an empty one.")
    store = default_memory_store()
    for _scope, content in entries:
        _check_content(content)  # all or nothing: check every entry before writing one
    # Each write is embedded in the background (agents.memory.embedding).
    for scope, content in entries:
        store.write(owner, content, scope=scope, category=MemoryCategory.CORE)
    return len(entries)
