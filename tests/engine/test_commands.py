"""Slash-command parsing (S4)."""

from __future__ import annotations

import pytest

from agents.engine.commands import COMMANDS, parse_slash_command

THREAD = "6f1c2b1e-8a3d-4c55-9f2e-0a1b2c3d4e5f"


@pytest.mark.parametrize(
    "name",
    [
        "help",
        "new",
        "stop",
        "compact",
        "clear",
        "summarize",
        "undo",
        "redo",
        "model",
        "models",
        "tools",
        "skills",
        "status",
        "ping",
        "version",
        "heartbeat",
    ],
)
def test_every_command_is_recognised(name: str) -> None:
    command = parse_slash_command(f"/{name}")
    assert command is not None
    assert command.name == name
    assert command.error is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("/interrupt", "stop"),
        ("/summary", "summarize"),
        ("/?", "help"),
        ("/thread new", "new"),
        ("/STOP", "stop"),
        ("  /ping  ", "ping"),
        ("/status@claw_bot", "status"),
    ],
)
def test_aliases_case_and_bot_suffix(text: str, name: str) -> None:
    command = parse_slash_command(text)
    assert command is not None
    assert command.name == name


def test_model_takes_an_optional_name() -> None:
    assert parse_slash_command("/model").args == ""  # type: ignore[union-attr]
    command = parse_slash_command("/model claude-sonnet-4")
    assert command is not None
    assert command.args == "claude-sonnet-4"
    assert command.error is None
    assert parse_slash_command("/model a b").error == "usage: /model [name]"  # type: ignore[union-attr]


def test_thread_and_resume_need_a_thread_id() -> None:
    resume = parse_slash_command(f"/resume {THREAD}")
    assert resume is not None
    assert resume.args == THREAD
    assert resume.error is None
    thread = parse_slash_command(f"/thread {THREAD}")
    assert thread is not None
    assert thread.name == "thread"
    assert thread.error is None
    assert "usage" in (parse_slash_command("/resume").error or "")  # type: ignore[union-attr]
    assert "not a thread id" in (parse_slash_command("/thread xyz").error or "")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text",
    ["hello", "/etc/hosts is missing", "/unknowncmd", "see /help\nplease", "", "// comment"],
)
def test_ordinary_text_is_not_a_command(text: str) -> None:
    assert parse_slash_command(text) is None


def test_the_command_list_matches_the_catalogue() -> None:
    assert set(COMMANDS) == {
        "help",
        "new",
        "stop",
        "compact",
        "clear",
        "summarize",
        "undo",
        "redo",
        "agent",
        "model",
        "models",
        "tools",
        "skills",
        "status",
        "ping",
        "version",
        "heartbeat",
        "thread",
        "resume",
    }


def test_system_commands_bypass_thread_state() -> None:
    assert parse_slash_command("/stop").bypasses_thread_state  # type: ignore[union-attr]
    assert not parse_slash_command("/undo").bypasses_thread_state  # type: ignore[union-attr]
