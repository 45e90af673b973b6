"""The usage report page (O2) in a real browser: the chart and the tables for two
agents, and a table's CSV download is byte for byte the API's CSV."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agents.actions.config import do_create_agent
from tests.api.conftest import client_for, make_key
from tests.budgets.test_usage_report import _usage_on
from tests.ui.conftest import Stack, signed_in_page

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_report_shows_the_chart_and_tables_for_two_agents_and_its_csv_is_the_apis(
    stack: Stack, browser: Any, tenant_a: Any
) -> None:
    second = do_create_agent(tenant_a.tenant, slug="second", name="Second", model=tenant_a.model)
    _usage_on(tenant_a, datetime(2026, 4, 3, 10, tzinfo=UTC), cost="1.25", user_id=tenant_a.member.pk)
    _usage_on(tenant_a, datetime(2026, 4, 3, 11, tzinfo=UTC), cost="0.75", user_id=tenant_a.member.pk)
    _usage_on(tenant_a, datetime(2026, 4, 5, 9, tzinfo=UTC), cost="2", agent_id=second.pk, model="m2")
    period = "since=2026-04-01&until=2026-04-07"

    page = signed_in_page(browser, stack, tenant_a.owner)
    page.goto(f"{stack.url}/reports/usage/?{period}")
    chart = page.wait_for_selector("#usage-chart[data-ready='1']", state="attached")
    assert chart.get_attribute("data-series") == "2"  # one stacked series per agent
    box = chart.bounding_box()
    assert box is not None
    assert box["height"] > 50
    assert "$4.000000" in page.inner_text("#report-totals")
    agents = page.inner_text("#table-agent tbody")
    assert "assistant" in agents
    assert "second" in agents
    assert "2.000000" in page.inner_text("#table-agent tbody")
    assert "m2" in page.inner_text("#table-model tbody")
    assert page.locator("#table-day tbody tr").count() == 2

    with page.expect_download() as download:
        page.click("#table-agent .csv-link")
    from_page = Path(download.value.path()).read_text()
    api = client_for(make_key(tenant_a, "admin"))
    response = api.get(f"/api/v1/usage/?group_by=agent&{period}&format=csv")
    from_api = b"".join(response.streaming_content).decode()
    assert from_page == from_api
    assert from_api.splitlines()[1:] == [
        "assistant,2,200,20,0,0,2.000000",
        "second,1,100,10,0,0,2.000000",
    ]
