"""D3: `claw doctor` in a subprocess, as an operator runs it: it never starts a database,
names what is wrong, and exits 1 when any check fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection


def run_doctor(
    env_overrides: dict[str, str], *, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(env_overrides, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "claw_platform.cli.main", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def line_for(output: str, name: str) -> str:
    for line in output.splitlines():
        if line[2:].startswith(name + " ") or line[2:] == name:
            return line
    raise AssertionError(f"no line for {name!r} in:\n{output}")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_it_reports_a_stopped_embedded_database_and_starts_none(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    result = run_doctor({"CLAW_VAR_DIR": str(var_dir)}, unset=("DATABASE_URL",))
    assert result.returncode == 1, result.stdout + result.stderr
    database = line_for(result.stdout, "database")
    assert database.startswith("✗")
    assert (
        f"embedded PostgreSQL under {var_dir}/pgdata is not running (start it with `claw up`)"
    ) in database
    for dependent in ("pgvector", "migrations", "channel layer", "workers"):
        line = line_for(result.stdout, dependent)
        assert line.startswith("✗")
        assert "skipped" in line
    assert line_for(result.stdout, "settings").startswith("✓")
    assert not (var_dir / "pgdata" / "postmaster.pid").exists()


def test_it_reports_an_unreachable_database_url(tmp_path: Path) -> None:
    url = f"postgresql://claw:secret@127.0.0.1:{closed_port()}/claw"
    result = run_doctor({"DATABASE_URL": url, "CLAW_VAR_DIR": str(tmp_path / "var")})
    assert result.returncode == 1
    database = line_for(result.stdout, "database")
    assert database.startswith("✗")
    assert "refused" in database or "connect" in database
    assert "skipped" in line_for(result.stdout, "migrations")


def test_it_passes_the_database_checks_on_a_migrated_database(django_db_setup: Any) -> None:
    parts = urlsplit(os.environ["DATABASE_URL"])
    url = urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))
    result = run_doctor({"DATABASE_URL": url})
    for name in ("settings", "database", "pgvector", "migrations"):
        assert line_for(result.stdout, name).startswith("✓"), result.stdout
    assert "PostgreSQL 18" in line_for(result.stdout, "database")
    assert "(iterative index scans)" in line_for(result.stdout, "pgvector")
    # Nobody runs a worker against the test database: doctor says so and fails.
    assert line_for(result.stdout, "workers").startswith("✗")
    assert result.returncode == 1


@pytest.mark.parametrize("variable", ["CLAW_Q_WORKERS", "CLAW_Q_CLUSTER"])
def test_a_bad_setting_is_named_and_fails(variable: str, tmp_path: Path) -> None:
    result = run_doctor({variable: "many", "CLAW_VAR_DIR": str(tmp_path / "var")})
    assert result.returncode == 1
    settings_line = line_for(result.stdout, "settings")
    assert settings_line.startswith("✗")
    assert variable in settings_line


def test_pgvector_older_than_0_8_fails_with_what_to_do() -> None:
    from claw_platform.ops.checks import pgvector_verdict

    # The library on the server is new enough, the extension in the database is not.
    stale = pgvector_verdict("0.7.4", "0.8.1")
    assert not stale.ok
    assert "version 0.7.4 is older than 0.8.0" in stale.detail
    assert "iterative index scans" in stale.detail
    assert "the server has 0.8.1: run `ALTER EXTENSION vector UPDATE;`" in stale.detail
    # Both old: the server itself needs a newer pgvector.
    old = pgvector_verdict("0.5.1", "0.5.1")
    assert not old.ok
    assert "upgrade pgvector on the database server to 0.8.0 or later" in old.detail
    assert not pgvector_verdict(None).ok
    assert "not installed" in pgvector_verdict(None).detail
    for version in ("0.8.0", "0.8.1", "1.0.0"):
        assert pgvector_verdict(version, version).ok, version
    assert not pgvector_verdict("unknown", None).ok


@pytest.mark.django_db
def test_pgvector_on_the_test_database_passes_with_iterative_scans() -> None:
    from claw_platform.ops.checks import check_pgvector

    result = check_pgvector()
    assert result.ok, result.detail
    assert result.detail.startswith("version 0.8") or result.detail.startswith("version 1.")
    assert result.detail.endswith("(iterative index scans)")
