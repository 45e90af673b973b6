"""`claw metrics-token`: the bearer token Prometheus sends to /metrics."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "print the bearer token for /metrics (made once into ./var/metrics_token; --rotate for a new one)"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("metrics-token", help=HELP, description=HELP)
    parser.add_argument(
        "--rotate", action="store_true", help="replace the token (restart the web server after)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from claw_platform import config
    from claw_platform.observability.metrics_access import metrics_token

    print(metrics_token(config.var_dir(), rotate=args.rotate))
    return 0
