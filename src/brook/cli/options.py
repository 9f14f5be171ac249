"""Options every command shares: the root's `--debug` and `--timeout` (which subcommands read
from `current`) and `--bootstrap-server` of the client commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer

DEFAULT_TIMEOUT = 10.0
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


@dataclass
class Settings:
    debug: bool = False
    timeout: float = DEFAULT_TIMEOUT  # seconds to wait for the broker, per request


current = Settings()


def reset(debug: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Settings:
    global current
    current = Settings(debug, timeout)
    return current


def bootstrap_option() -> Any:
    return typer.Option(DEFAULT_BOOTSTRAP, "--bootstrap-server", "-b",
                        envvar="BROOK_BOOTSTRAP_SERVER", help="host:port of a broker.")
