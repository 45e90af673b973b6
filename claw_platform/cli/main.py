"""The `claw` command. Each subcommand lives in its own module, listed in COMMANDS,
which exposes ``register(subparsers)`` and sets ``func`` (returning an exit code);
adding one is adding a module and a line here. Modules import Django lazily, so
`claw --help` and the `claw up` supervisor stay fast and small."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    "claw_platform.cli.up",
    "claw_platform.cli.doctor",
    "claw_platform.cli.manage",
    "claw_platform.cli.secrets_key",
    "claw_platform.cli.chat",
    "claw_platform.cli.apikey",
    "claw_platform.cli.unlock",
    "claw_platform.cli.metrics_token",
)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="claw", description="Claw Platform: LLM agents, self-hosted.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMANDS:
        importlib.import_module(module_name).register(subparsers)
    return parser, subparsers.choices


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser, commands = build_parser()
    command = commands.get(args[0]) if args else None
    if command is not None and command.get_default("pass_through"):
        # Everything after the name belongs to Django (`claw manage shell -c …`), verbatim.
        namespace = parser.parse_args(args[:1])
        namespace.django_args = args[1:]
    else:
        namespace = parser.parse_args(args)
    from claw_platform.config import ConfigError
    from claw_platform.tenancy.rls import system_bypass

    try:
        # The operator's commands (bootstrap, doctor, apikey, chat, unlock ...) act
        # across tenants; the servers `claw up` starts are processes of their own.
        with system_bypass():
            code: int = namespace.func(namespace)
    except ConfigError as exc:
        print(f"claw: configuration error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
