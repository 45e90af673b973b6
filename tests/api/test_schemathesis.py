"""Property-based tests of the whole REST API from its own schema (/api/schema/):
schemathesis generates valid and invalid requests for every operation, sent with an
admin key through the WSGI application; no answer may be a 5xx, and every documented
answer must match its schema. The tenant event stream is left out (an endless
stream by design; tests/api/test_events.py covers it)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.api.conftest import make_key
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def admin_key(live_agent, fake_llm, inline_runs, settings):
    fake_llm.default_reply = FakeTurn(text="A reply.")
    settings.CLAW_API_WAIT_SECONDS = 5
    return make_key(live_agent, "admin")


def test_the_api_never_errors_and_keeps_to_its_schema(admin_key):
    from django.core.wsgi import get_wsgi_application

    api = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application()).exclude(
        path="/api/v1/events/"
    )
    headers = {"Authorization": f"Bearer {admin_key}"}
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    operations = 0
    for result in api.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def exercise(case):
            response = case.call(headers=headers)
            case.validate_response(response, checks=checks)

        exercise()
    assert operations >= 40
