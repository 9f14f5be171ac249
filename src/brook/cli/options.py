"""Options every command shares: the root's `--debug`, and `--bootstrap-server` (`-b`) and
`--timeout`, which every command that talks to a broker takes after its name too (as Kafka's
tools do) and the root takes before it; the one after the command wins. `--command-config`
(a client.properties file with the client's security settings, as Kafka's tools take it) may
stand anywhere on the line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import typer

DEFAULT_TIMEOUT = 10.0
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "BROOK_BOOTSTRAP_SERVER"
COMMAND_CONFIG_ENV = "BROOK_COMMAND_CONFIG"


@dataclass
class Settings:
    debug: bool = False
    timeout: float = DEFAULT_TIMEOUT  # seconds to wait for the broker, per request
    bootstrap: str | None = None  # the root's -b
    command_config: str | None = None  # --command-config


current = Settings()


def reset(debug: bool = False, timeout: float = DEFAULT_TIMEOUT,
          bootstrap: str | None = None, command_config: str | None = None) -> Settings:
    global current
    current = Settings(debug, timeout, bootstrap, command_config)
    return current


def security():
    """The client security settings of --command-config, else of $BROOK_COMMAND_CONFIG, else
    PLAINTEXT (a ClientSecurity)."""
    from ..security.client_settings import ClientSecurity, ClientSecurityError
    from .errors import CliError
    path = current.command_config or os.environ.get(COMMAND_CONFIG_ENV)
    if not path:
        return ClientSecurity()
    try:
        return ClientSecurity.from_file(path)
    except ClientSecurityError as exc:
        raise CliError(f"--command-config {path}: {exc}", 2) from None


def take_command_config(args: list[str]) -> tuple[list[str], str | None]:
    """`--command-config PATH` (or `=PATH`) taken out of the arguments wherever it stands:
    Kafka's tools take it after the command's name, brook's root before it."""
    rest, path, i = [], None, 0
    while i < len(args):
        arg = args[i]
        if arg == "--command-config" and i + 1 < len(args):
            path, i = args[i + 1], i + 2
            continue
        if arg.startswith("--command-config="):
            path = arg.split("=", 1)[1]
        elif arg == "--":
            rest.extend(args[i:])
            break
        else:
            rest.append(arg)
        i += 1
    return rest, path


def bootstrap(value: str | None) -> str:
    """The command's -b, else the root's, else $BROOK_BOOTSTRAP_SERVER, else the default."""
    return value or current.bootstrap or os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def timeout(value: float | None) -> float:
    """The command's --timeout, else the root's (which has the default)."""
    return current.timeout if value is None else value


def bootstrap_option() -> Any:
    return typer.Option(None, "--bootstrap-server", "-b", show_default=False,
                        help=f"host:port of a broker. [default: ${BOOTSTRAP_ENV}, else "
                             f"{DEFAULT_BOOTSTRAP}]")


def timeout_option() -> Any:
    return typer.Option(None, "--timeout", min=0.1, show_default=False,
                        help=f"Seconds to wait for a broker's answer. [default: "
                             f"{DEFAULT_TIMEOUT:g}]")
