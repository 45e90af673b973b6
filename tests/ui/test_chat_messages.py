"""Messages in the chat page, in a real browser (issue 26, item 1): a copy button on
every reply and code block, highlighted code (highlight.js), timestamps, styled
quotes, raw HTML shown as text ("Use the <img> tag") and neutralised links that no
longer look like links; dark mode (system and toggle) and the favicon (item 5)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.fake_llm import Turn
from tests.ui.conftest import Stack, signed_in_page
from tests.ui.test_chat_ui import chat_session, open_session, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPLY = (
    "Use the <img> tag for pictures, and <b>this</b> is not bold.\n\n"
    "> Quoted wisdom from the docs.\n\n"
    "[a trap](javascript:alert(1)) and [fine](https://example.org/x)\n\n"
    "```python\ndef greet(name):\n    return 'hi ' + name  # a comment\n```"
)


@pytest.mark.parametrize("width", [1280, 390])
def test_replies_have_copy_buttons_highlighting_timestamps_quotes_and_safe_text(
    stack: Stack, browser: Any, live_agent: Any, fake_llm: Any, width: int
) -> None:
    fake_llm.script(Turn(text=REPLY, chunk_size=30))
    session = chat_session(live_agent)
    page = signed_in_page(browser, stack, live_agent.member)
    page.set_viewport_size({"width": width, "height": 800})
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
    page.goto(f"{stack.url}/chat/s/{session.pk}/")
    page.wait_for_selector("body[data-socket=open]", state="attached")
    send(page, "Show me everything")
    page.wait_for_selector(".assistant-text:not(.live) pre code.hljs")
    answer = page.locator(".assistant-msg").last

    # Raw HTML is text: the words stay, nothing is markup.
    text = answer.locator(".assistant-text").inner_text()
    assert "Use the <img> tag for pictures" in text
    assert "<b>this</b> is not bold" in text
    assert answer.locator("img, b").count() == 0

    # Highlighted code: highlight.js's spans, the language recognised.
    code = answer.locator("pre code.hljs")
    assert code.get_attribute("data-language") == "python"
    assert code.locator("span.hljs-keyword", has_text="def").count() == 1
    assert code.locator("span.hljs-comment").count() == 1

    # A quote is styled (a coloured bar on its left).
    quote = answer.locator("blockquote")
    assert quote.inner_text().strip() == "Quoted wisdom from the docs."
    assert quote.evaluate("q => getComputedStyle(q).borderLeftStyle") == "solid"

    # The unsafe link is plain text now; the safe one is still a link.
    trap = answer.locator(".neutralised-link", has_text="a trap")
    assert trap.count() == 1
    assert trap.evaluate("n => n.tagName") == "SPAN"
    assert trap.evaluate("n => getComputedStyle(n).textDecorationLine") == "none"
    assert trap.evaluate("n => getComputedStyle(n).cursor") != "pointer"
    assert answer.locator("a", has_text="a trap").count() == 0
    assert answer.locator('a[href="https://example.org/x"]').count() == 1

    # Timestamps on the question and the reply.
    assert page.locator(".user-line time.msg-time").count() == 1
    assert answer.locator(".msg-foot time.msg-time").get_attribute("datetime")

    # Copy the code block, then the whole reply.
    answer.locator(".code-block .copy-button").click()
    answer.locator(".code-block .copy-button", has_text="Copied").wait_for()
    assert page.evaluate("() => navigator.clipboard.readText()") == (
        "def greet(name):\n    return 'hi ' + name  # a comment\n"
    )
    answer.locator(".msg-foot .copy-button").click()
    answer.locator(".msg-foot .copy-button", has_text="Copied").wait_for()
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied.startswith("Use the <img> tag for pictures")
    assert "```python" in copied

    # A reload draws the same from the database.
    page.reload()
    page.wait_for_selector(".assistant-text pre code.hljs span.hljs-keyword")
    assert "Use the <img> tag" in page.locator(".assistant-text").inner_text()
    assert page.locator(".user-line time.msg-time").count() == 1
    page.context.close()


def test_dark_mode_follows_the_system_and_the_toggle_and_the_page_has_a_favicon(
    stack: Stack, browser: Any, live_agent: Any
) -> None:
    session = chat_session(live_agent)
    page = open_session(browser, stack, live_agent, session)
    background = "() => getComputedStyle(document.documentElement).backgroundColor"
    page.emulate_media(color_scheme="light")
    light = page.evaluate(background)
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(background)
    assert light != dark
    assert dark == "rgb(21, 22, 26)"

    # The toggle: system -> dark -> light, kept across a reload.
    page.emulate_media(color_scheme="dark")
    page.click("#theme-toggle")  # dark (explicit)
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    page.click("#theme-toggle")  # light, although the system says dark
    assert page.evaluate(background) == light
    page.reload()
    page.wait_for_selector("body[data-socket=open]", state="attached")
    assert page.evaluate("() => document.documentElement.dataset.theme") == "light"
    assert page.evaluate(background) == light
    page.click("#theme-toggle")  # back to the system's setting (dark here)
    assert page.evaluate(background) == dark

    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon
    response = page.request.get(stack.url + icon)
    assert response.status == 200
    assert b"<svg" in response.body()
    page.context.close()


def test_errors_read_in_plain_language(stack: Stack, browser: Any, live_agent: Any) -> None:
    session = chat_session(live_agent)
    page = open_session(browser, stack, live_agent, session)
    plain = "t => window.ClawErrors.plain(t)"
    assert page.evaluate(plain, "openai: rate limited (HTTP 429)").startswith(
        "The model provider is rate-limiting us"
    )
    assert page.evaluate(plain, "openai: the response ended before it was complete") == (
        "The provider's reply was cut off before it was complete."
    )
    assert page.evaluate(plain, "openai: invalid api key (HTTP 401)").startswith(
        "The model provider refused our credentials"
    )
    assert page.evaluate(plain, "openai: upstream (HTTP 503)").startswith("The model provider had a problem")
    assert page.evaluate(plain, "something odd") == "This reply failed."
    # The technical text is drawn as text, never as markup.
    html = page.evaluate("t => window.ClawErrors.errorBox(t).innerHTML", "<img src=x onerror=alert(1)>")
    assert "<img" not in html
    assert "&lt;img" in html
    page.context.close()
