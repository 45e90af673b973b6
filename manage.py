#!/usr/bin/env python
"""Django's command-line utility. Starts the embedded database when DATABASE_URL is unset."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    from claw_platform.cli.environment import prepare_environment

    database = prepare_environment()
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    finally:
        # An embedded server this command started is stopped with it; one that
        # `claw up` (or another command) runs is left alone.
        if database is not None and database.started_here:
            database.stop()


if __name__ == "__main__":
    main()
