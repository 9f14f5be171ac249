"""Options every command shares: the root's `--debug`, and `--bootstrap-server` (`-b`) and
`--timeout`, which every command that talks to a broker takes after its name too (as Kafka's
tools do) and the root takes before it; the one after the command wins."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import typer

DEFAULT_TIMEOUT = 10.0
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "BROOK_BOOTSTRAP_SERVER"


@dataclass
class Settings:
    debug: bool = False
    timeout: float = DEFAULT_TIMEOUT  # seconds to wait for the broker, per request
    bootstrap: str | None = None  # the root's -b


current = Settings()


def reset(debug: bool = False, timeout: float = DEFAULT_TIMEOUT,
          bootstrap: str | None = None) -> Settings:
    global current
    current = Settings(debug, timeout, bootstrap)
    return current


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
