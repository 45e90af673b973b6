"""/api/docs/ rendered by the product itself (issue 26, item 8): Swagger UI's files come
from the installed drf-spectacular-sidecar package, so the page works with every
request to another host blocked."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.ui.conftest import Stack, signed_in_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.mark.parametrize("width", [1280, 390])
def test_api_docs_render_offline(stack: Stack, browser: Any, live_agent: Any, width: int) -> None:
    page = signed_in_page(browser, stack, live_agent.owner)
    page.set_viewport_size({"width": width, "height": 900})
    outside: list[str] = []
    ours = urlsplit(stack.url).netloc

    def only_ours(route: Any) -> None:
        if urlsplit(route.request.url).netloc == ours:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_ours)
    response = page.goto(f"{stack.url}/api/docs/")
    assert response.status == 200
    page.locator(".swagger-ui .info .title", has_text="Claw Platform API").wait_for(timeout=30_000)
    page.locator(".opblock-tag", has_text="sessions").first.wait_for()
    assert outside == []
    page.context.close()
