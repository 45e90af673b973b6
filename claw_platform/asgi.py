"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter
from django.core.asgi import get_asgi_application

from claw_platform.config import env_bool

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")

django_application = get_asgi_application()

if env_bool("CLAW_SERVE_STATIC", False):
    # Daphne serves no files. `claw up` sets this so Django serves the static files
    # (from the apps, no collectstatic needed) and the admin is styled; behind a
    # proxy that serves STATIC_ROOT, leave it off.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_application = ASGIStaticFilesHandler(django_application)

application = ProtocolTypeRouter({"http": django_application})
