"""The request and response shapes of OpenAI's Chat Completions, and their mapping
onto an agent's session: the model is the agent's slug; the last message is the
new turn; earlier ones seed a new session's history."""

from __future__ import annotations

import base64
import binascii
import re
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from claw_platform.json_input import JsonInputError, parse_json

# Parameters OpenAI clients send that an agent decides for itself (its model, its
# temperature, its limits): accepted and not applied. Anything else is refused.
IGNORED_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "seed",
        "stop",
        "store",
        "metadata",
        "service_tier",
        "reasoning_effort",
        "parallel_tool_calls",
        "tool_choice",
        "logprobs",
        "top_logprobs",
        "modalities",
        "prediction",
        "response_format",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
KNOWN_PARAMS = (
    frozenset(
        {"model", "messages", "stream", "stream_options", "user", "n", "tools", "functions", "function_call"}
    )
    | IGNORED_PARAMS
)
MAX_MESSAGES = 1000
MAX_TEXT_CHARS = 100_000


class WireError(Exception):
    """A bad request: OpenAI's ``invalid_request_error`` naming the parameter."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        *,
        status: int = 400,
        code: str | None = None,
        error_type: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.error_type = error_type

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


def parse_wire_json(raw: bytes) -> Any:
    """The request body (``claw_platform.json_input``), or a 400 naming the parameter
    in OpenAI's style (``messages[0].content``)."""
    try:
        return parse_json(raw)
    except JsonInputError as exc:
        raise WireError(exc.message, _param(exc.path), code="invalid_json") from None


def _param(path: tuple[str | int, ...] | None) -> str | None:
    if not path:
        return None
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@dataclass(frozen=True)
class ChatRequest:
    model: str
    text: str
    history: list[tuple[str, str]]  # (role, text) before the last message
    stream: bool
    include_usage: bool
    user: str | None
    # The last message's images (E23): (media type, bytes), from data: URLs.
    images: tuple[tuple[str, bytes], ...] = ()


IMAGE_PLACEHOLDER = "[image]"
_DATA_URL = re.compile(r"^data:([a-z0-9.+/-]+);base64,(.*)$", re.IGNORECASE | re.DOTALL)


def _image_of(part: dict[str, Any], param: str) -> tuple[str, bytes]:
    """A ``{"type": "image_url", "image_url": {"url": "data:…;base64,…"}}`` part, checked:
    a data URL (nothing is fetched), an image by its own bytes, within the cap."""
    from agents.actions.attachments import image_type

    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        raise WireError("An image part needs 'image_url.url'.", f"{param}.image_url.url")
    match = _DATA_URL.match(url)
    if match is None:
        raise WireError(
            "Images must be sent inline as data:image/...;base64 URLs (nothing is fetched).",
            f"{param}.image_url.url",
        )
    try:
        content = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise WireError("The image's base64 data is not valid.", f"{param}.image_url.url") from None
    cap = int(settings.CLAW_CHAT_IMAGE_MAX_BYTES)
    if len(content) > cap:
        raise WireError(
            f"An image may be at most {cap:,} bytes.",
            f"{param}.image_url.url",
            status=413,
            code="payload_too_large",
        )
    media_type = image_type(content)
    if media_type is None:
        raise WireError("Only PNG, JPEG, GIF and WebP images are supported.", f"{param}.image_url.url")
    return media_type, content


def _content_of(content: Any, param: str) -> tuple[str, list[tuple[str, bytes]]]:
    if isinstance(content, str):
        return content, []
    if content is None:
        return "", []
    if isinstance(content, list):
        texts: list[str] = []
        images: list[tuple[str, bytes]] = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                images.append(_image_of(part, f"{param}[{i}]"))
                continue
            if kind not in {"text", "input_text"}:
                raise WireError("Only text and image_url content parts are supported.", f"{param}[{i}]")
            text = part.get("text")
            if not isinstance(text, str):
                raise WireError("A text part needs a string 'text'.", f"{param}[{i}].text")
            texts.append(text)
        return "\n".join(texts), images
    raise WireError("Message content must be a string or a list of content parts.", param)


def _text_of(content: Any, param: str) -> str:
    """An earlier message's text; its images (not kept) become placeholders."""
    text, images = _content_of(content, param)
    return "\n".join([text, *[IMAGE_PLACEHOLDER] * len(images)]) if images else text


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise WireError("The body must be a JSON object.")
    unknown = sorted(set(body) - KNOWN_PARAMS)
    if unknown:
        raise WireError(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("'model' is required: the slug of an agent (see /v1/models).", "model")
    if body.get("n") not in (None, 1):
        raise WireError("Only n=1 is supported.", "n")
    if body.get("tools") or body.get("functions"):
        raise WireError(
            "Client-side tools are not supported: the agent's own tools run on the server.",
            "tools" if body.get("tools") else "functions",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool | type(None)):
        raise WireError("'stream' must be a boolean.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise WireError("'stream_options' must be an object.", "stream_options")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > 200):
        raise WireError("'user' must be a string of at most 200 characters.", "user")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("'messages' must be a non-empty array.", "messages")
    if len(messages) > MAX_MESSAGES:
        raise WireError(f"At most {MAX_MESSAGES} messages.", "messages")
    parsed: list[tuple[str, str]] = []
    images: list[tuple[str, bytes]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise WireError("Each message must be an object.", f"messages[{i}]")
        role = message.get("role")
        if role not in {"system", "developer", "user", "assistant", "tool"}:
            raise WireError("Unknown role; use system, developer, user or assistant.", f"messages[{i}].role")
        if role == "tool":
            raise WireError(
                "Tool messages are not supported: the agent's tools run on the server.", f"messages[{i}].role"
            )
        if i == len(messages) - 1:
            text, images = _content_of(message.get("content"), f"messages[{i}].content")
            if len(images) > settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE:
                raise WireError(
                    f"At most {settings.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE} images per message.",
                    f"messages[{i}].content",
                )
        else:
            text = _text_of(message.get("content"), f"messages[{i}].content")
        if len(text) > MAX_TEXT_CHARS:
            raise WireError(
                f"A message is limited to {MAX_TEXT_CHARS:,} characters.", f"messages[{i}].content"
            )
        parsed.append((str(role), text))
    last_role, last_text = parsed[-1]
    if last_role == "user" and images and not last_text.strip():
        last_text = "(see the images)"
    if last_role != "user" or not last_text.strip():
        raise WireError(
            "The last message must be a user message with some text.", f"messages[{len(parsed) - 1}]"
        )
    return ChatRequest(
        model=model,
        text=last_text,
        history=parsed[:-1],
        stream=bool(stream),
        include_usage=bool(options.get("include_usage")),
        user=user,
        images=tuple(images),
    )


def usage_body(input_tokens: int, output_tokens: int, cached: int = 0) -> dict[str, Any]:
    prompt = input_tokens + cached
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output_tokens,
        "total_tokens": prompt + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def completion_body(
    completion_id: str, model: str, text: str, usage: dict[str, Any], created: int | None = None
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


def chunk_body(
    completion_id: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def model_body(slug: str, created: int, owner: str) -> dict[str, Any]:
    return {"id": slug, "object": "model", "created": created, "owned_by": owner}
