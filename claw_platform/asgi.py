"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

from __future__ import annotations

import os

from channels.routing import ProtocolTypeRouter
from django.conf import settings
from django.core.asgi import get_asgi_application

from claw_platform.config import env_bool

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
serving = not settings.configured
if serving:
    # The web server's entry point (not a test importing the application): each HTTP
    # request runs its sync code in a thread of its own, so pooled connections spare
    # every request a new one (a few ms each). Read when the settings load, just below.
    # No connection outlives its request thread, even with the pool turned off.
    os.environ.setdefault("CLAW_DB_POOL_SIZE", "20")
    # A request that finds the database away answers 503 after this long, not 10 s.
    os.environ.setdefault("CLAW_DB_CONNECT_TIMEOUT", "2")
    os.environ["CLAW_DB_CONN_MAX_AGE"] = "0"

django_application = get_asgi_application()

from django.db import connection  # noqa: E402  (after Django is set up)

from claw_platform import db_pool  # noqa: E402

db_pool.install(getattr(connection, "pool", None))

if env_bool("CLAW_SERVE_STATIC", False):
    # Daphne serves no files. `claw up` sets this so Django serves the static files
    # (from the apps, no collectstatic needed) and the admin is styled; behind a
    # proxy that serves STATIC_ROOT, leave it off.
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_application = ASGIStaticFilesHandler(django_application)

# Imported after Django is set up: the consumers import models.
from channels.routing import URLRouter  # noqa: E402

from channels_app.origin import OriginOrKeyClientValidator  # noqa: E402
from channels_app.routing import unknown_socket_route, websocket_urlpatterns  # noqa: E402
from channels_app.socket_session import socket_auth_stack  # noqa: E402
from claw_platform.body_limit import BodyLimitMiddleware  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Every route's body cap, on the bytes received (chunked or not), before
        # Django reads the body.
        "http": BodyLimitMiddleware(django_application),
        # The login session authenticates a browser's socket, whose Origin must name an
        # allowed host; an API client (no Origin) sends an API key in its first frame.
        "websocket": OriginOrKeyClientValidator(
            socket_auth_stack(URLRouter([*websocket_urlpatterns, unknown_socket_route]))
        ),
    }
)

if serving:
    from claw_platform.body_limit import install_daphne_body_caps
    from claw_platform.heap import freeze_startup_heap
    from claw_platform.immediate_writes import install_immediate_writes
    from claw_platform.lazy_log_args import install_lazy_autobahn_log_args

    install_daphne_body_caps()
    install_immediate_writes()
    install_lazy_autobahn_log_args()
    freeze_startup_heap()
