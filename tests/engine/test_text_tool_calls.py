"""Tool calls written as text by weaker models, and name aliases (E7)."""

from __future__ import annotations

import pytest

from agents.engine.text_tool_calls import (
    TOOL_NAME_ALIASES,
    extract_text_tool_calls,
    resolve_tool_name,
)

KNOWN = {"bash", "read_file", "write_file", "web_search"}


@pytest.mark.parametrize("alias", ["shell", "sh", "exec", "run_command", "bash", "Shell"])
def test_e7_shell_aliases_resolve_to_the_agents_shell_tool(alias: str) -> None:
    assert resolve_tool_name(alias, KNOWN) == "bash"
    assert resolve_tool_name(alias, {"shell"}) == "shell"


def test_e7_file_aliases_and_spellings_resolve() -> None:
    assert resolve_tool_name("cat", KNOWN) == "read_file"
    assert resolve_tool_name("fileread", KNOWN) == "read_file"
    assert resolve_tool_name("file_write", KNOWN) == "write_file"
    assert resolve_tool_name("Read-File", KNOWN) == "read_file"
    assert resolve_tool_name("functions.bash", KNOWN) == "bash"
    assert "read" in TOOL_NAME_ALIASES


def test_e7_unknown_names_do_not_resolve() -> None:
    assert resolve_tool_name("launch_missiles", KNOWN) is None
    assert resolve_tool_name("edit", KNOWN) is None  # the agent has no edit tool
    assert resolve_tool_name("", KNOWN) is None


def test_e7_it_parses_a_tool_call_xml_block_with_json() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>'
    remaining, calls = extract_text_tool_calls(text, KNOWN)
    assert remaining == "Let me look."
    assert [(c.id, c.name, c.arguments) for c in calls] == [("text_call_0", "bash", {"command": "ls"})]


def test_e7_it_parses_invoke_blocks_with_parameters() -> None:
    text = (
        '<function_calls><invoke name="read_file"><parameter name="path">a.txt</parameter>'
        '<parameter name="limit">20</parameter></invoke></function_calls>'
    )
    remaining, calls = extract_text_tool_calls(text, KNOWN)
    assert remaining == ""
    assert calls[0].name == "read_file"
    assert calls[0].arguments == {"path": "a.txt", "limit": 20}


def test_e7_it_parses_function_equals_blocks() -> None:
    text = "<function=bash>\n<parameter=command>\necho hi\n</parameter>\n</function>"
    _, calls = extract_text_tool_calls(text, KNOWN)
    assert calls[0].name == "bash"
    assert calls[0].arguments == {"command": "echo hi"}
    _, calls = extract_text_tool_calls('<function=web_search>{"query": "x"}</function>', KNOWN)
    assert calls[0].arguments == {"query": "x"}


def test_e7_it_parses_glm_style_calls() -> None:
    text = "Checking.\nbash\n<arg_key>command</arg_key>\n<arg_value>pwd</arg_value>\nDone soon."
    remaining, calls = extract_text_tool_calls(text, KNOWN)
    assert calls[0].name == "bash"
    assert calls[0].arguments == {"command": "pwd"}
    assert remaining == "Checking.\nDone soon."


def test_e7_it_parses_fenced_json_and_tool_call_blocks() -> None:
    text = 'Here:\n```json\n{"tool": "bash", "args": {"command": "date"}}\n```\nok'
    remaining, calls = extract_text_tool_calls(text, KNOWN)
    assert remaining == "Here:\n\nok"
    assert calls[0].arguments == {"command": "date"}
    text = '```tool_call\n[{"name": "cat", "arguments": "{\\"path\\": \\"x\\"}"}]\n```'
    _, calls = extract_text_tool_calls(text, KNOWN)
    assert [(c.name, c.arguments) for c in calls] == [("read_file", {"path": "x"})]


def test_e7_it_parses_bare_json_objects_in_order() -> None:
    text = (
        'First {"name": "bash", "arguments": {"command": "uptime"}} then '
        '{"function": {"name": "web_search", "arguments": "{\\"query\\": \\"news\\"}"}}'
    )
    remaining, calls = extract_text_tool_calls(text, KNOWN)
    assert [(c.id, c.name) for c in calls] == [
        ("text_call_0", "bash"),
        ("text_call_1", "web_search"),
    ]
    assert calls[1].arguments == {"query": "news"}
    assert "uptime" not in remaining


def test_e7_it_parses_mistral_tool_calls_prefix() -> None:
    _, calls = extract_text_tool_calls(
        '[TOOL_CALLS] [{"name": "bash", "arguments": {"command": "id"}}]', KNOWN
    )
    assert calls[0].arguments == {"command": "id"}


def test_e7_only_known_tools_become_calls() -> None:
    text = '<tool_call>{"name": "rm_everything", "arguments": {}}</tool_call>'
    assert extract_text_tool_calls(text, KNOWN) == (text, [])


def test_e7_json_data_without_arguments_is_not_a_call() -> None:
    text = 'The result was {"name": "read", "count": 3}.'
    assert extract_text_tool_calls(text, KNOWN) == (text, [])


def test_e7_plain_text_is_returned_unchanged() -> None:
    text = "No tools needed {really}. ```python\nprint(1)\n```"
    assert extract_text_tool_calls(text, KNOWN) == (text, [])


def test_e7_ids_are_deterministic() -> None:
    text = '<tool_call>{"name": "bash", "arguments": {"command": "a"}}</tool_call>'
    first = extract_text_tool_calls(text, KNOWN)
    assert first == extract_text_tool_calls(text, KNOWN)
    assert first[1][0].id == "text_call_0"
