"""`brook console`: serve the web console on --listen (loopback by default), as a Kafka client
of the cluster at -b with --command-config's security."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path
from typing import Optional

import typer

from ..cli import options
from ..cli.errors import CliError
from ..cli.options import bootstrap_option, timeout_option

DEFAULT_LISTEN = "127.0.0.1:8080"


def parse_listen(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` (loopback) as (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise CliError(f"invalid --listen {text!r}: expected HOST:PORT", code=2)
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def console(
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", metavar="HOST:PORT",
                               help="Where the console listens (port 0: any free port)."),
    read_only: bool = typer.Option(False, "--read-only",
                                   help="Show everything, change nothing: every change is "
                                        "hidden and refused."),
    basic_auth_file: Optional[Path] = typer.Option(
        None, "--basic-auth-file", metavar="FILE",
        help="Ask for a login: user:password lines (or user:pbkdf2_sha256$... from "
             "--hash-password)."),
    lag_interval: float = typer.Option(5.0, "--lag-interval", min=0.5, max=60,
                                       help="Seconds between lag samples of every group."),
    hash_password: bool = typer.Option(False, "--hash-password",
                                       help="Read a password and print a line for the "
                                            "--basic-auth-file, then exit."),
    metrics_port: Optional[int] = typer.Option(
        None, "--metrics-port", min=1, max=65535,
        help="The brokers' metrics.port (brook's): the Cluster page shows each broker's produce "
             "and fetch rates from http://BROKER_HOST:PORT/metrics."),
    metrics_url: list[str] = typer.Option(
        [], "--metrics-url", metavar="ID=URL",
        help="Where broker ID serves its metrics (repeatable; overrides --metrics-port)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Serve the web console: consumer groups with live lag charts, the offsets topic, topics,
    messages and the cluster (docs/console.md)."""
    from . import safety

    if hash_password:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
        typer.echo(f"USER:{safety.hash_password(password)}")
        return
    from .metrics import BrokerRates, parse_metrics_urls

    host, port = parse_listen(listen)
    try:
        rates = BrokerRates(metrics_port, parse_metrics_urls(metrics_url))
    except ValueError as exc:
        raise CliError(str(exc), code=2) from None
    users = safety.Users()
    if basic_auth_file is not None:
        try:
            users, warning = safety.Users.from_file(basic_auth_file)
        except safety.AuthFileError as exc:
            raise CliError(f"--basic-auth-file: {exc}", code=2) from None
        if warning:
            sys.stderr.write(f"brook console: warning: {warning}\n")
    if not is_loopback(host) and not users:
        sys.stderr.write(f"brook console: warning: listening on {host}, beyond this machine, "
                         "with no login (give --basic-auth-file)\n")
    serve(host, port, options.bootstrap(bootstrap), options.timeout(timeout), options.security(),
          read_only=read_only, users=users, lag_interval=lag_interval, rates=rates)


def serve(host: str, port: int, bootstrap: str, timeout: float, security, *, read_only: bool,
          users, lag_interval: float, rates=None) -> None:
    import logging

    import uvicorn

    from .app import ConsoleSettings, create_app
    from .backend import Backend
    from .lag import LagHistory
    from .sampler import Sampler

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    sock = bind(host, port)
    actual = sock.getsockname()[1]
    backend = Backend(bootstrap, timeout, security, LagHistory(), lag_interval, rates)
    settings = ConsoleSettings(read_only=read_only, users=users, lag_interval=lag_interval)
    sampler = Sampler(backend.sample, lag_interval)
    app = create_app(backend, settings, sampler)
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"brook console: http://{shown}:{actual}/ for {bootstrap}"
                     f"{' (read-only)' if read_only else ''}"
                     f"{' (login required)' if users else ''}\n")
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            server_header=False, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
