"""The `brook` command."""

from __future__ import annotations

import logging
import sys
from typing import Optional

import typer

from . import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="brook: a Kafka-protocol-compatible message log broker.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"brook {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint="--override")
        out[key.strip()] = value.strip()
    return out


@app.command()
def broker(
    config: Optional[str] = typer.Option(None, "--config", "-c",
                                         help="A server.properties file (Kafka's keys)."),
    override: list[str] = typer.Option([], "--override", "-o",
                                       help="key=value, overriding the file; repeatable."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    """Run a broker in the foreground (Ctrl-C or SIGTERM stops it cleanly)."""
    from .broker.config import BrokerConfig, ConfigError
    from .broker.server import run_broker

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = BrokerConfig.from_file(config, _parse_overrides(override))
    except (ConfigError, OSError) as exc:
        typer.echo(f"brook: invalid configuration: {exc}", err=True)
        raise typer.Exit(2)
    try:
        run_broker(cfg)
    except OSError as exc:
        typer.echo(f"brook: {exc}", err=True)
        raise typer.Exit(1)


def main() -> None:
    app()
