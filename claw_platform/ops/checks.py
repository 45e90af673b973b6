"""Readiness and diagnostic checks, shared by /readyz and `claw doctor`.

Each check returns a ``CheckResult`` (never raises): ok or not, and a short reason a
human can act on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str


def check_settings() -> CheckResult:
    from django.conf import settings

    problems = []
    if settings.DEBUG:
        problems.append("DEBUG is on")
    detail = "; ".join(problems) if problems else "loaded"
    return CheckResult("settings", True, detail)


def check_database() -> CheckResult:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version')")
            version = cursor.fetchone()[0]
        settings_dict = connection.settings_dict
        where = settings_dict.get("HOST") or "local socket"
        return CheckResult("database", True, f"PostgreSQL {version} at {where}")
    except Exception as exc:
        return CheckResult("database", False, _first_line(exc))


def check_database_role() -> CheckResult:
    """The role the product connects as (issue 21): fails when it is a superuser, has
    BYPASSRLS, owns tables, or no separate owner role runs the migrations."""
    from claw_platform.db_roles import owner_settings

    name = "database role"
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_user, rolsuper, rolbypassrls, "
                "(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') "
                " AND pg_get_userbyid(c.relowner) = current_user) "
                "FROM pg_roles WHERE rolname = current_user"
            )
            role, superuser, bypassrls, owned = cursor.fetchone()
    except Exception as exc:
        return CheckResult(name, False, _first_line(exc))
    problems = []
    if superuser:
        problems.append("a superuser")
    if bypassrls:
        problems.append("allowed to bypass row-level security")
    if owned:
        problems.append(f"the owner of {owned} tables")
    if problems:
        return CheckResult(
            name,
            False,
            f"the product runs as {role}, {' and '.join(problems)} (weaker): connect DATABASE_URL as a "
            "runtime role and migrate with DATABASE_OWNER_URL (see the README)",
        )
    if owner_settings() is None:
        return CheckResult(
            name, True, f"{role}: not superuser, owns no tables (migrations need DATABASE_OWNER_URL)"
        )
    return CheckResult(name, True, f"{role}: not superuser, owns no tables, no BYPASSRLS")


# Iterative index scans (``hnsw.iterative_scan``), which keep a tenant-filtered memory
# recall from coming back short, arrived in pgvector 0.8.0.
PGVECTOR_MINIMUM = (0, 8, 0)


def _version_tuple(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in text.strip().split(".")[:3])
    except ValueError:
        return None


def pgvector_verdict(installed: str | None, available: str | None = None) -> CheckResult:
    """The pgvector line from the extension's installed version (``pg_extension``) and
    the version the server's library offers (``pg_available_extensions``)."""
    minimum = ".".join(map(str, PGVECTOR_MINIMUM))
    if installed is None:
        return CheckResult("pgvector", False, "the vector extension is not installed (run migrations)")
    version = _version_tuple(installed)
    if version is not None and version >= PGVECTOR_MINIMUM:
        return CheckResult("pgvector", True, f"version {installed} (iterative index scans)")
    offered = _version_tuple(available or "")
    if offered is not None and offered >= PGVECTOR_MINIMUM:
        fix = f"the server has {available}: run `ALTER EXTENSION vector UPDATE;` as the database owner"
    else:
        fix = (
            f"upgrade pgvector on the database server to {minimum} or later "
            "(https://github.com/pgvector/pgvector#installation), then run "
            "`ALTER EXTENSION vector UPDATE;` as the database owner"
        )
    return CheckResult(
        "pgvector",
        False,
        f"version {installed} is older than {minimum}: without iterative index scans a "
        f"tenant's memory recall comes back short; {fix}",
    )


def check_pgvector() -> CheckResult:
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
                " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')"
            )
            installed, available = cursor.fetchone()
        return pgvector_verdict(installed, available)
    except Exception as exc:
        return CheckResult("pgvector", False, _first_line(exc))


def check_migrations() -> CheckResult:
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if plan:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:3])
            return CheckResult("migrations", False, f"{len(plan)} pending ({names}…): run `claw migrate`")
        return CheckResult("migrations", True, "up to date")
    except Exception as exc:
        return CheckResult("migrations", False, _first_line(exc))


def check_channel_layer(timeout: float = 3.0) -> CheckResult:
    from channels.layers import get_channel_layer

    async def round_trip() -> None:
        layer = get_channel_layer()
        if layer is None:
            raise RuntimeError("no channel layer configured")
        channel = await layer.new_channel()
        # Receive first, then send until it arrives: channels_postgres drops a
        # notification that lands before the receiver is listening.
        receiver = asyncio.ensure_future(layer.receive(channel))
        try:
            async with asyncio.timeout(timeout):
                while not receiver.done():
                    await layer.send(channel, {"type": "health.ping"})
                    await asyncio.wait({receiver}, timeout=0.2)
        finally:
            receiver.cancel()
        message = receiver.result()
        if message.get("type") != "health.ping":
            raise RuntimeError(f"unexpected message {message!r}")

    try:
        async_to_sync(round_trip)()
    except TimeoutError:
        return CheckResult("channel layer", False, f"no round trip within {timeout:.0f} s")
    except Exception as exc:
        return CheckResult("channel layer", False, _first_line(exc))
    from django.conf import settings

    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    return CheckResult("channel layer", True, f"{backend} round trip ok")


def check_workers() -> CheckResult:
    from claw_platform.ops.heartbeat import SEEN_RECENTLY, workers_seen_recently

    try:
        workers = workers_seen_recently()
    except Exception as exc:
        return CheckResult("workers", False, _first_line(exc))
    if not workers:
        return CheckResult(
            "workers", False, f"no worker heartbeat in the last {int(SEEN_RECENTLY.total_seconds())} s"
        )
    return CheckResult("workers", True, f"{len(workers)} seen: " + ", ".join(w.name for w in workers[:5]))


def check_shell_sandbox() -> CheckResult:
    """Where the bash tool's commands run (T15, issue 21), named first: ``bubblewrap``,
    ``host shell (operator opt-in: weaker)`` or ``none: shell refused``. Fails when
    commands could run outside the sandbox (the operator allowed the host: Landlock
    does not hide the database socket), or when the operator allows networked shells
    and a sandbox cannot be given a network of its own (they are refused)."""
    from tools_app.sandbox.operator import (
        HOST_SETTING,
        NETWORK_SETTING,
        host_shell_allowed,
        shell_network_allowed,
    )
    from tools_app.sandbox.shell import host_confinement, sandbox_available, sandbox_network_problem

    name = "shell sandbox"
    if not sandbox_available():
        if host_shell_allowed():
            return CheckResult(
                name,
                False,
                f"host shell (operator opt-in: weaker): bubblewrap does not work here, and {HOST_SETTING}=allow "
                f"runs commands on the host under {host_confinement()}, which does not hide the product's "
                "database socket; install the bubblewrap package",
            )
        return CheckResult(
            name, True, "none: shell refused (bubblewrap does not work here; install the bubblewrap package)"
        )
    if host_shell_allowed():
        return CheckResult(
            name,
            False,
            f"bubblewrap, but {HOST_SETTING}=allow lets agents set to host run commands outside it "
            "(operator opt-in: weaker)",
        )
    if not shell_network_allowed():
        return CheckResult(name, True, f"bubblewrap; no network ({NETWORK_SETTING} is not allow)")
    problem = sandbox_network_problem()
    if problem:
        return CheckResult(
            name,
            False,
            f"bubblewrap; {NETWORK_SETTING}=allow but a sandbox cannot have its own network, so networked "
            f"shells are refused: {problem}",
        )
    return CheckResult(
        name, True, "bubblewrap; network: its own namespace through slirp4netns (outbound only, host blocked)"
    )


def check_providers(timeout: float = 5.0) -> list[CheckResult]:
    """Each enabled provider answers its model list (auth errors count as failures)."""
    from agents.models import LLMProvider, ProviderKind
    from agents.providers.headers import headers_problem

    results = []
    try:
        providers = list(LLMProvider.objects.unscoped().filter(enabled=True).order_by("tenant_id", "name"))
    except Exception as exc:  # e.g. migrations not applied yet: say so, do not crash
        return [CheckResult("providers", False, f"cannot read the providers: {_first_line(exc)}")]
    for provider in providers:
        name = f"provider {provider.name} (tenant {provider.tenant_id})"
        base = provider.base_url.rstrip("/")
        if provider.kind == ProviderKind.ANTHROPIC:
            url = f"{base}/v1/models"
            headers = {"x-api-key": provider.api_key or "", "anthropic-version": "2023-06-01"}
        else:
            url = f"{base}/models"
            headers = {"Authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}
        problem = headers_problem(provider.extra_headers or {})
        if problem:
            results.append(CheckResult(name, False, f"extra headers cannot be sent: {problem}"))
            continue
        headers.update(provider.extra_headers or {})
        try:
            response = httpx.get(url, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            results.append(CheckResult(name, False, f"unreachable: {_first_line(exc) or type(exc).__name__}"))
            continue
        if response.status_code >= 400:
            results.append(CheckResult(name, False, f"HTTP {response.status_code} from {url}"))
        else:
            results.append(CheckResult(name, True, f"reachable ({url})"))
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
