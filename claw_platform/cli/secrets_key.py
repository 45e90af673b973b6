"""`claw secrets-key`: a new Fernet key for CLAW_SECRETS_KEY (secrets at rest)."""

from __future__ import annotations

import argparse
from typing import Any

NAME = "secrets-key"
HELP = "print a new key for CLAW_SECRETS_KEY (prepend it to rotate: new,old)"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cryptography.fernet import Fernet

    print(Fernet.generate_key().decode())
    return 0
