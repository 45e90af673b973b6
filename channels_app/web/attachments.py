"""Attachments from the chat page (E23): ``POST /chat/s/<id>/attachments/?name=…``
with the file's bytes as the body (at most the larger of the two caps is read),
answered with the attachment's id for the next message frame; and
``GET /chat/s/<id>/attachments/<n>/`` for a picture in the transcript. The member
rule holds on both (another member's chat is a 404); viewers cannot upload."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from agents.actions.attachments import AttachmentRefused, Upload, do_add_attachment
from agents.models import Attachment, AttachmentKind
from channels_app.web.chats import _access, _acting, _error
from claw_platform.tenancy.context import tenant_context

MAX_NAME_CHARS = 255


def _cap() -> int:
    return max(settings.CLAW_CHAT_IMAGE_MAX_BYTES, settings.CLAW_CHAT_FILE_MAX_BYTES)


@require_POST
@login_required
def upload_attachment(request: HttpRequest, session_id: Any) -> JsonResponse:
    access = _acting(request, session_id)
    if isinstance(access, JsonResponse):
        return access
    name = request.GET.get("name", "")
    if not name or len(name) > MAX_NAME_CHARS or "\x00" in name:
        return _error(400, "invalid", "Say the file's name (at most 255 characters).", "name")
    cap = _cap()
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    too_big = f"{name} is larger than the {cap // (1024 * 1024)} MB an attachment may have."
    if declared > cap:
        return _error(413, "too_large", too_big)
    content = request.read(cap + 1)  # the cap holds on what is read, whatever was declared
    if len(content) > cap:
        return _error(413, "too_large", too_big)
    if not content:
        return _error(400, "invalid", f"{name} is empty.")
    session = access.session
    try:
        with tenant_context(session.tenant_id):
            attachment = do_add_attachment(session, request.user, Upload(name, content))
    except AttachmentRefused as exc:
        return _error(400, "refused", str(exc))
    return JsonResponse(
        {
            "id": attachment.pk,
            "name": attachment.name,
            "kind": attachment.kind,
            "media_type": attachment.media_type,
            "size": attachment.size,
            "workspace_path": attachment.workspace_path,
        },
        status=201,
    )


# The body middleware's cap for this route (the chat pages' forms have 64 KB).
upload_attachment.max_body_bytes = _cap  # type: ignore[attr-defined]


@require_GET
@login_required
def attachment_image(request: HttpRequest, session_id: Any, attachment_id: int) -> HttpResponse:
    session = _access(request, session_id).session
    row = (
        Attachment._base_manager.filter(
            pk=attachment_id, session_id=session.pk, tenant_id=session.tenant_id, kind=AttachmentKind.IMAGE
        )
        .values_list("media_type", "data")
        .first()
    )
    if row is None:
        raise Http404("No such image.")
    response = HttpResponse(bytes(row[1]), content_type=row[0])
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=3600"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
