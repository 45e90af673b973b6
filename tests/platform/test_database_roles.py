"""Issue 21, defect 1 (the database part): the embedded PostgreSQL asks every
connection for a password, and the product connects as a role that is neither a
superuser nor the owner of its tables, cannot bypass row-level security, and cannot
change the schema. Migrations run as the owner role."""

from __future__ import annotations

import stat
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from claw_platform.db_roles import as_owner, owner_settings, quote_role, runtime_grant_statements
from claw_platform.embedded_db import OWNER_ROLE, RUNTIME_ROLE, passwords_file, trusts_connections
from claw_platform.ops.checks import check_database_role


def _embedded():  # type: ignore[no-untyped-def]
    from claw_platform.testing import pytest_plugin

    if pytest_plugin._embedded is None:
        pytest.skip("the suite runs on a database given by DATABASE_URL")
    return pytest_plugin._embedded


def _socket(url: str) -> tuple[str, str]:
    query = parse_qs(urlsplit(url).query)
    return query["host"][0], query["port"][0]


@pytest.mark.parametrize("role", [OWNER_ROLE, RUNTIME_ROLE])
def test_a_local_client_without_the_password_is_refused(role: str) -> None:
    host, port = _socket(_embedded().url)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host=host, port=port, user=role, dbname="claw", connect_timeout=5).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(
            host=host, port=port, user=role, password="guess", dbname="claw", connect_timeout=5
        ).close()


def test_pg_hba_trusts_nothing_and_the_passwords_file_is_private() -> None:
    embedded = _embedded()
    assert not trusts_connections(embedded.pgdata)
    hba = (embedded.pgdata / "pg_hba.conf").read_text()
    assert "scram-sha-256" in hba
    assert "trust" not in hba.replace("# Written", "")
    mode = stat.S_IMODE(passwords_file(embedded.pgdata).stat().st_mode)
    assert mode == 0o600


def test_trust_peer_and_ident_lines_count_as_trusting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pg_hba.conf").write_text("# trust in a comment\nlocal all all scram-sha-256\n")
    assert not trusts_connections(tmp_path)
    for method in ("trust", "peer", "ident"):
        (tmp_path / "pg_hba.conf").write_text(f"local all all {method}\n")
        assert trusts_connections(tmp_path)


def _fails(statement: str) -> str:
    with pytest.raises(DatabaseError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    return str(caught.value)


@pytest.mark.django_db
def test_the_runtime_role_is_not_superuser_owns_nothing_and_cannot_change_the_schema() -> None:
    assert owner_settings() is not None, "the suite migrates as a separate owner role"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb "
            "FROM pg_roles WHERE rolname = current_user"
        )
        role, superuser, bypassrls, createrole, createdb = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) = current_user"
        )
        owned = cursor.fetchone()[0]
        cursor.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )
        tables = cursor.fetchone()[0]
    assert role != owner_settings()["USER"]  # type: ignore[index]
    assert (superuser, bypassrls, createrole, createdb) == (False, False, False, False)
    assert tables > 20
    assert owned == 0
    assert "permission denied" in _fails("SELECT rolpassword FROM pg_authid")
    assert "must be owner" in _fails("ALTER TABLE tenancy_tenant ADD COLUMN stolen text")
    assert "must be owner" in _fails("DROP TABLE tenancy_tenant")
    assert "must be owner" in _fails("ALTER TABLE tenancy_tenant DISABLE ROW LEVEL SECURITY")
    assert "permission denied" in _fails("CREATE TABLE public.planted (x int)")
    assert "permission denied" in _fails(f"ALTER ROLE {quote_role(role)} SUPERUSER")
    # What it may do: read and write rows.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tenancy_tenant")


@pytest.mark.django_db(transaction=True)  # switching roles needs a new connection
def test_tables_a_later_migration_creates_are_granted_by_default() -> None:
    runtime = connection.settings_dict["USER"]
    with as_owner(), connection.cursor() as cursor:
        cursor.execute("CREATE TABLE later_table (id bigserial PRIMARY KEY, note text)")
    try:
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO later_table (note) VALUES ('x') RETURNING id")
            assert cursor.fetchone()[0] >= 1
            cursor.execute("SELECT has_table_privilege(current_user, 'later_table', 'DELETE')")
            assert cursor.fetchone()[0] is True
    finally:
        with as_owner(), connection.cursor() as cursor:
            cursor.execute("DROP TABLE later_table")
    assert runtime == connection.settings_dict["USER"]


@pytest.mark.django_db(transaction=True)
def test_doctor_passes_the_runtime_role_and_fails_the_owner() -> None:
    runtime = check_database_role()
    assert runtime.ok, runtime.detail
    assert "not superuser" in runtime.detail
    with as_owner():
        owner = check_database_role()
    assert not owner.ok
    assert "weaker" in owner.detail


def test_grant_statements_refuse_odd_role_names() -> None:
    with pytest.raises(ValueError):
        runtime_grant_statements('app"; DROP TABLE x; --', "postgres")
