"""Output sanitizer (E12) and silent NO_REPLY replies (E13)."""

from __future__ import annotations

from agents.engine.sanitizer import (
    NO_REPLY_TOKEN,
    collapse_duplicate_paragraphs,
    is_silent_reply,
    sanitize_output,
    strip_leading_blank_lines,
)


def test_e12_it_strips_garbled_tool_xml() -> None:
    raw = 'Checking now.\n<tool_call>{"name": "bash"}</tool_call>\n<parameter name="x">1</parameter>'
    assert sanitize_output(raw).text == "Checking now."


def test_e12_a_reply_that_is_only_garbled_tool_xml_becomes_empty() -> None:
    raw = '<minimax:tool_call><invoke name="bash">ls</invoke></minimax:tool_call>'
    assert sanitize_output(raw).text == ""


def test_e12_it_keeps_tool_xml_shown_inside_a_code_block() -> None:
    raw = "Example:\n```xml\n<tool_call>{}</tool_call>\n```"
    assert "<tool_call>{}</tool_call>" in sanitize_output(raw).text


def test_e12_it_strips_downgraded_text_tool_calls_and_their_output() -> None:
    raw = (
        'Here you go.\n[Tool Call: bash]\nArguments: {"command": "ls"}\n\n'
        "[Tool Result bash]\nfile_a\nfile_b\n\nThe folder has two files."
    )
    text = sanitize_output(raw).text
    assert "Tool Call" not in text
    assert "file_a" not in text
    assert text.startswith("Here you go.")
    assert text.endswith("The folder has two files.")


def test_e12_it_extracts_thinking_and_hides_it_by_default() -> None:
    raw = "<think>The user wants X.</think>Here is X.<thinking>double-check</thinking>"
    out = sanitize_output(raw)
    assert out.text == "Here is X."
    assert "The user wants X." in out.thinking
    assert "double-check" in out.thinking


def test_e12_it_handles_every_thinking_tag_case_insensitively() -> None:
    for tag in ("think", "thinking", "thought", "antThinking", "THINK"):
        out = sanitize_output(f"<{tag}>secret plan</{tag}>Answer")
        assert out.text == "Answer"
        assert out.thinking == "secret plan"


def test_e12_it_shows_thinking_inline_when_asked() -> None:
    out = sanitize_output("<think>plan</think>Answer", show_thinking=True)
    assert out.thinking == "plan"
    assert out.text == "> plan\n\nAnswer"


def test_e12_it_treats_text_before_a_dangling_closing_think_tag_as_thinking() -> None:
    out = sanitize_output("I should greet.</think>Hello!")
    assert out.text == "Hello!"
    assert out.thinking == "I should greet."


def test_e12_it_removes_final_tags_but_keeps_their_content() -> None:
    assert sanitize_output("<final>The answer is 4.</final>").text == "The answer is 4."


def test_e12_it_strips_echoed_system_message_blocks() -> None:
    raw = "[System Message] Heartbeat tick\nignore this line\n\nActual reply."
    assert sanitize_output(raw).text == "Actual reply."


def test_e12_it_collapses_consecutive_duplicate_paragraphs() -> None:
    raw = "Hello there.\n\nHello there.\n\nHello there. \n\nBye."
    assert sanitize_output(raw).text == "Hello there.\n\nBye."


def test_e12_it_keeps_non_consecutive_and_code_repeats() -> None:
    assert collapse_duplicate_paragraphs("A\n\nB\n\nA") == "A\n\nB\n\nA"
    code = "```\nprint(1)\n\nprint(1)\n```"
    assert collapse_duplicate_paragraphs(code) == code


def test_e12_it_strips_leading_blank_lines() -> None:
    assert strip_leading_blank_lines("\n  \n\t\n    indented\nnext") == "    indented\nnext"
    assert sanitize_output("\n\n\nHi").text == "Hi"


def test_e12_the_steps_run_in_goclaw_order() -> None:
    raw = (
        "\n\n<think>hidden</think><final>Result.\n\nResult.</final>\n"
        "<tool_call>x</tool_call>\n[System Message] echo\n\n"
    )
    out = sanitize_output(raw)
    assert out.text == "Result."
    assert out.thinking == "hidden"


def test_e13_a_reply_that_is_only_no_reply_is_silent() -> None:
    assert NO_REPLY_TOKEN == "NO_REPLY"
    for text in ("NO_REPLY", "  NO_REPLY\n", "**NO_REPLY**", "`NO_REPLY`."):
        assert is_silent_reply(text), text
    out = sanitize_output("<think>nothing for me</think>NO_REPLY")
    assert out.silent is True
    assert out.thinking == "nothing for me"


def test_e13_a_real_answer_mentioning_no_reply_is_delivered() -> None:
    assert not is_silent_reply("Reply NO_REPLY when idle, otherwise answer.")
    assert not is_silent_reply("")
    assert sanitize_output("The answer is 42. NO_REPLY").silent is False
