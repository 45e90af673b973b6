"""T2: the workspace tools read, write, edit, list, glob and grep inside the run's
workspace, with size caps and errors the model can act on."""

from __future__ import annotations

import pytest

from tests.tools.helpers import Run, configure

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(tenant_a):
    return Run(tenant_a.agent, tenant_a.member)


def test_write_read_and_edit_a_file(run):
    assert run.call("write_file", path="src/app.py", content="x = 1\ny = 2\n").content.startswith(
        "Created src/app.py"
    )
    assert (run.workspace / "src" / "app.py").read_text() == "x = 1\ny = 2\n"
    assert run.call("read_file", path="src/app.py", offset=2).content == "y = 2\n"
    edited = run.call("edit_file", path="src/app.py", old_string="y = 2", new_string="y = 3")
    assert not edited.is_error, edited.content
    assert run.call("read_file", path="src/app.py").content == "x = 1\ny = 3\n"
    assert run.call("write_file", path="src/app.py", content="z").content.startswith("Overwrote")


def test_edit_needs_a_unique_match(run):
    run.call("write_file", path="a.txt", content="one one two")
    twice = run.call("edit_file", path="a.txt", old_string="one", new_string="1")
    assert twice.error_type == "tool_error"
    assert "2 times" in twice.content
    missing = run.call("edit_file", path="a.txt", old_string="three", new_string="3")
    assert missing.error_type == "tool_error"
    assert not run.call(
        "edit_file", path="a.txt", old_string="one", new_string="1", replace_all=True
    ).is_error
    assert (run.workspace / "a.txt").read_text() == "1 1 two"


def test_list_glob_and_grep(run):
    run.call("write_file", path="notes/a.md", content="alpha\nTODO: beta\n")
    run.call("write_file", path="notes/deep/b.md", content="gamma todo\n")
    run.call("write_file", path="c.py", content="print('todo')\n")
    listing = run.call("list_dir", path="notes").content
    assert "file  a.md" in listing
    assert "dir   deep/" in listing
    assert run.call("glob", pattern="**/*.md").content.splitlines() == ["notes/a.md", "notes/deep/b.md"]
    assert run.call("glob", pattern="*.py").content == "c.py"
    found = run.call("grep", pattern="todo", ignore_case=True, include="*.md").content.splitlines()
    assert found == ["notes/a.md:2: TODO: beta", "notes/deep/b.md:1: gamma todo"]
    assert run.call("grep", pattern="(").error_type == "tool_error"


def test_size_caps_and_clear_errors(tenant_a):
    configure(tenant_a.agent, max_file_bytes=1_000)
    run = Run(tenant_a.agent, tenant_a.member)
    too_big = run.call("write_file", path="big.txt", content="x" * 2_000)
    assert too_big.error_type == "tool_error"
    assert "limit" in too_big.content
    (run.workspace / "big.bin").write_bytes(b"y" * 5_000)
    assert "limit" in run.call("read_file", path="big.bin").content
    (run.workspace / "blob.bin").write_bytes(b"\x00\x01" * 10)
    assert "binary" in run.call("read_file", path="blob.bin").content
    assert run.call("read_file", path="nope.txt").error_type == "tool_error"
    assert run.call("read_file").error_type == "invalid_arguments"


def test_file_tools_need_a_configured_run():
    import asyncio

    from agents.engine.interfaces import RunContext
    from agents.engine.types import ToolCallPart
    from tools_app.registry import RegistryToolExecutor, builtin_registry

    bare = RegistryToolExecutor([builtin_registry], role="member")
    result = asyncio.run(bare.execute(ToolCallPart("c", "read_file", {"path": "a"}), RunContext()))
    assert result.error_type == "tool_error"
    assert "not available" in result.content
