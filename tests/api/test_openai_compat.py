"""A3: the official ``openai`` client talks to /v1/ over real HTTP; the agent's own
tools run on the server; errors come in OpenAI's format."""

from __future__ import annotations

import openai
import pytest

from agents.models import Message, Session, UsageRecord
from tests.api.conftest import make_key
from tests.api.server import live_asgi_server
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(live_agent, inline_runs):
    with live_asgi_server() as url:
        yield openai.OpenAI(
            base_url=f"{url}/v1", api_key=make_key(live_agent, "write"), max_retries=0, timeout=30
        )


def test_models_are_the_tenants_agents(api):
    assert [m.id for m in api.models.list().data] == ["assistant"]
    assert api.models.retrieve("assistant").id == "assistant"


def test_a_reply_without_and_with_streaming_including_usage(api, fake_llm):
    from agents.engine.types import Usage

    fake_llm.script(FakeTurn(text="Hello from the agent.", usage=Usage(12, 5)))
    completion = api.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello from the agent."
    assert completion.choices[0].finish_reason == "stop"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 5)

    fake_llm.script(FakeTurn(text="Streaming, bit by bit.", chunk_size=3, usage=Usage(20, 7)))
    stream = api.chat.completions.create(
        model="assistant",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Streaming, bit by bit."
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 7
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_the_agents_own_tool_runs_on_the_server(api, fake_llm, live_agent):
    fake_llm.script(
        FakeTurn(text="Let me calculate.", tool_calls=[("calculate", {"expression": "6 * 7"}, "call_calc")]),
        FakeTurn(text="It is 42."),
    )
    completion = api.chat.completions.create(
        model="assistant", messages=[{"role": "user", "content": "6 times 7?"}]
    )
    assert completion.choices[0].message.content.endswith("It is 42.")
    tool_results = [m for m in Message.objects.unscoped().filter(tenant=live_agent.tenant, role="tool")]
    assert tool_results
    assert "42" in str(tool_results[-1].parts)
    second_request = fake_llm.requests[-1].json["messages"]
    assert any(m.get("role") == "tool" and "42" in str(m.get("content")) for m in second_request)
    assert UsageRecord.objects.unscoped().filter(tenant=live_agent.tenant).count() >= 3


def test_the_user_field_keeps_one_session_and_history_seeds_a_new_one(api, fake_llm, live_agent):
    fake_llm.script(FakeTurn(text="First."), FakeTurn(text="Second."), FakeTurn(text="Fresh."))
    for text in ("one", "two"):
        api.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": text}], user="alice"
        )
    sessions = Session.objects.unscoped().filter(
        tenant=live_agent.tenant, external_key="openai:assistant:alice"
    )
    assert sessions.count() == 1
    assert "one" in str(fake_llm.requests[1].json["messages"])
    api.chat.completions.create(
        model="assistant",
        messages=[
            {"role": "system", "content": "Answer tersely."},
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": "now"},
        ],
    )
    sent = str(fake_llm.requests[2].json["messages"])
    assert "earlier answer" in sent
    assert "Answer tersely." in sent


def test_errors_come_in_openais_format(api, live_agent):
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        api.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}], n=2)
    assert bad.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as unknown:
        api.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "hi"}], extra_body={"colour": "red"}
        )
    assert unknown.value.body["param"] == "colour"
    wrong = openai.OpenAI(base_url=str(api.base_url), api_key="claw_000000000000_nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    reader = openai.OpenAI(base_url=str(api.base_url), api_key=make_key(live_agent, "read"), max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        reader.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "hi"}])


def test_image_parts_reach_a_vision_model_and_are_checked(api, fake_llm, live_agent, settings):
    """E23 through /v1/: a data-URL image part arrives at the model as an image part
    (kept with the session's turn); a remote URL, a non-image and an image over the
    cap are refused in OpenAI's shape."""
    import base64

    from agents.models import Attachment, ModelProfile
    from tests.ui.test_pickers_and_attachments import png

    profile = ModelProfile.objects.unscoped().get(pk=live_agent.model.pk)
    profile.supports_vision = True
    profile.save()
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    fake_llm.script(FakeTurn(text="A red square."))
    completion = api.chat.completions.create(
        model="assistant",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    )
    assert completion.choices[0].message.content == "A red square."
    sent = fake_llm.requests[-1].json["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": url}} in sent
    assert {"type": "text", "text": "What is this?"} in sent
    assert (
        Attachment.objects.unscoped().filter(tenant=live_agent.tenant, session__channel="openai").count() == 1
    )

    settings.CLAW_CHAT_IMAGE_MAX_BYTES = 1024
    for part, message in [
        ({"url": "https://example.com/cat.png"}, "inline as data:image"),
        ({"url": "data:image/png;base64," + base64.b64encode(b"not an image").decode()}, "Only PNG"),
        (
            {"url": "data:image/png;base64," + base64.b64encode(png() + bytes(2000)).decode()},
            "at most 1,024 bytes",
        ),
    ]:
        with pytest.raises(openai.APIStatusError) as refused:
            api.chat.completions.create(
                model="assistant",
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": part}]}],
            )
        assert message in refused.value.body["message"]
