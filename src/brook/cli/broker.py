"""`brook broker`: run a broker in the foreground."""

from __future__ import annotations

import logging
import sys
from typing import Optional

import typer


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`key=value` strings as a dict (later ones win), as `--override` takes them."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint="--override")
        out[key.strip()] = value.strip()
    return out


def broker_overrides(override: list[str], metrics_port: int | None) -> dict[str, str]:
    """The config overrides of the command line; `--metrics-port N` is `metrics.port=N`."""
    overrides = parse_overrides(override)
    if metrics_port is not None:
        overrides["metrics.port"] = str(metrics_port)
    return overrides


def broker(
    config: Optional[str] = typer.Option(None, "--config", "-c",
                                         help="A server.properties file (Kafka's keys)."),
    override: list[str] = typer.Option([], "--override", "-o",
                                       help="key=value, overriding the file; repeatable."),
    metrics_port: Optional[int] = typer.Option(
        None, "--metrics-port", min=1, max=65535,
        help="Serve Prometheus metrics on this port (the metrics.port key)."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
    listeners_file: Optional[str] = typer.Option(
        None, "--listeners-file", metavar="FILE",
        help="Once listening, write each listener with the port it got (NAME://host:port, one "
             "a line) to FILE: how a script learns the port of a listener on port 0."),
) -> None:
    """Run a broker in the foreground (Ctrl-C or SIGTERM stops it cleanly)."""
    from ..broker.config import BrokerConfig, ConfigError
    from ..broker.metadata import InconsistentClusterIdError
    from ..broker.server import run_broker
    from ..cluster.errors import ClusterError
    from ..storage.dir_lock import LogDirInUseError

    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise typer.BadParameter(f"{log_level!r} is not DEBUG, INFO, WARNING or ERROR",
                                 param_hint="--log-level")
    overrides = broker_overrides(override, metrics_port)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = BrokerConfig.from_file(config, overrides)
    except (ConfigError, OSError) as exc:
        typer.echo(f"brook: invalid configuration: {exc}", err=True)
        raise typer.Exit(2)
    try:
        run_broker(cfg, listeners_file)
    except (LogDirInUseError, ClusterError, InconsistentClusterIdError) as exc:
        typer.echo(f"brook: {exc}", err=True)
        raise typer.Exit(1)
    except OSError as exc:
        # "[Errno 98] ..." is noise when the message says it all; a file's name is kept.
        message = exc.strerror if exc.strerror and not exc.filename else str(exc)
        typer.echo(f"brook: {message}", err=True)
        raise typer.Exit(1)
