"""T14: the path guard. An attack table -- each refused with ``path_policy_blocked`` --
run through the real executor and file tools, and another tenant's workspace out of
reach by any spelling."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tools.helpers import Run
from tools_app.guards.paths import resolve_workspace_path
from tools_app.registry import PATH_POLICY_BLOCKED

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(tenant_a):
    return Run(tenant_a.agent, tenant_a.member)


@pytest.fixture
def outside(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET")
    return secret


def _setup_links(workspace: Path, outside: Path) -> None:
    (workspace / "docs").mkdir(exist_ok=True)
    (workspace / "docs" / "ok.txt").write_text("fine")
    os.symlink(outside.parent, workspace / "to_outside")
    os.symlink(outside, workspace / "secret_link")
    os.symlink(outside.parent / "new.txt", workspace / "dangling")
    os.symlink(outside.parent / "deep" / "er", workspace / "deep_link")
    os.link(outside, workspace / "hardlink.txt")


ATTACKS = [
    ("read_file", {"path": "../../../../etc/passwd"}, "dot-dot out of the workspace"),
    ("read_file", {"path": "/etc/passwd"}, "absolute path outside"),
    ("read_file", {"path": "docs/../../x"}, "dot-dot after a folder"),
    ("read_file", {"path": "to_outside/secret.txt"}, "through a linked folder"),
    ("read_file", {"path": "secret_link"}, "a link to a file outside"),
    ("read_file", {"path": "deep_link/../secret.txt"}, "link-then-dot-dot"),
    ("write_file", {"path": "dangling", "content": "x"}, "write through a dangling link"),
    ("write_file", {"path": "to_outside/planted.txt", "content": "x"}, "write into a linked folder"),
    ("read_file", {"path": "hardlink.txt"}, "read a hard link to a file outside"),
    ("write_file", {"path": "hardlink.txt", "content": "overwritten"}, "write a hard link"),
    ("edit_file", {"path": "hardlink.txt", "old_string": "TOP", "new_string": "NO"}, "edit a hard link"),
    ("read_file", {"path": ".ssh/id_rsa"}, "ssh keys"),
    ("write_file", {"path": ".ssh/authorized_keys", "content": "k"}, "plant an ssh key"),
    ("read_file", {"path": ".aws/credentials"}, "aws credentials"),
    ("read_file", {"path": ".gnupg/secring.gpg"}, "gpg keyring"),
    ("read_file", {"path": ".kube/config"}, "kube config"),
    ("read_file", {"path": ".config/gcloud/credentials.db"}, "gcloud"),
    ("read_file", {"path": ".env"}, "dotenv"),
    ("write_file", {"path": "app/.env.production", "content": "A=1"}, "dotenv variant"),
    ("read_file", {"path": "certs/server.key"}, "a private key"),
    ("read_file", {"path": "tls/site.pem"}, "a pem file"),
    ("list_dir", {"path": "/"}, "list the root"),
    ("list_dir", {"path": "to_outside"}, "list through a link"),
    ("glob", {"pattern": "../*"}, "glob out of the workspace"),
    ("grep", {"pattern": "SECRET", "path": "to_outside"}, "grep through a link"),
    ("read_file", {"path": "docs/ok.txt\x00.png"}, "a NUL byte"),
]


@pytest.mark.parametrize(("tool", "arguments", "label"), ATTACKS, ids=[a[2] for a in ATTACKS])
def test_it_refuses_path_attacks_with_path_policy_blocked(run, outside, tool, arguments, label):
    _setup_links(run.workspace, outside)
    result = run.call(tool, **arguments)
    assert result.is_error, (label, result.content)
    assert result.error_type == PATH_POLICY_BLOCKED, (label, result.error_type, result.content)
    assert outside.read_text() == "TOP SECRET"
    assert not (outside.parent / "new.txt").exists()
    assert not (outside.parent / "planted.txt").exists()
    assert str(outside.parent) not in result.content  # X5: no host paths in errors


def test_it_refuses_another_tenants_workspace_by_absolute_path(tenant_a, tenant_b):
    theirs = Run(tenant_b.agent, tenant_b.member)
    assert theirs.call("write_file", path="plans.txt", content="B's plans").is_error is False
    ours = Run(tenant_a.agent, tenant_a.member)
    assert theirs.workspace != ours.workspace
    target = str(theirs.workspace / "plans.txt")
    result = ours.call("read_file", path=target)
    assert result.error_type == PATH_POLICY_BLOCKED
    relative = os.path.relpath(target, ours.workspace)
    assert ours.call("read_file", path=relative).error_type == PATH_POLICY_BLOCKED
    assert ours.call("grep", pattern="plans").content.startswith("No matches")


def test_open_agents_get_a_workspace_per_user_and_predefined_ones_per_agent(tenant_a):
    member = Run(tenant_a.agent, tenant_a.member)
    admin = Run(tenant_a.agent, tenant_a.admin)
    assert member.workspace != admin.workspace
    tenant_a.agent.agent_type = "predefined"
    tenant_a.agent.save()
    shared_1 = Run(tenant_a.agent, tenant_a.member)
    shared_2 = Run(tenant_a.agent, tenant_a.admin)
    assert shared_1.workspace == shared_2.workspace
    assert shared_1.workspace != member.workspace


def test_ordinary_paths_inside_the_workspace_work(run):
    assert not run.call("write_file", path="notes/today.md", content="hello\nworld\n").is_error
    assert run.call("read_file", path="notes/today.md").content == "hello\nworld\n"
    assert run.call("read_file", path=str(run.workspace / "notes" / "today.md")).content.startswith("hello")
    assert run.call("read_file", path="notes/../notes/today.md", limit=1).content == "hello\n"


def test_a_link_swapped_in_after_the_check_is_refused_by_the_kernel(run, outside):
    target = run.workspace / "race.txt"
    resolved = resolve_workspace_path(run.workspace, "race.txt", for_write=True)
    os.symlink(outside, target)  # the swap, between the check and the open
    from tools_app.guards.paths import open_nofollow
    from tools_app.registry import ToolError

    with pytest.raises(ToolError) as caught:
        open_nofollow(resolved, os.O_WRONLY | os.O_TRUNC)
    assert caught.value.error_type == PATH_POLICY_BLOCKED
    assert outside.read_text() == "TOP SECRET"
