"""`brook configs`: a broker's whole configuration, or the cluster-wide dynamic defaults, and
changing the dynamic ones (kafka-configs.sh for brokers; topic configs are under
`brook topics`)."""

from __future__ import annotations

from typing import Any, Optional

import typer

from . import options, output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option
from .topics import parse_configs

SET, DELETE = 0, 1  # IncrementalAlterConfigs operations

app = typer.Typer(no_args_is_help=True,
                  help="Broker configs: describe (every config, its value and where it comes "
                       "from) and alter (dynamic configs, per broker or cluster-wide).")


def _target(broker: int | None, broker_defaults: bool) -> tuple[str, str]:
    """(resource name, how messages name it): one broker, or the cluster-wide defaults."""
    if (broker is None) == (not broker_defaults):
        raise CliError("give one of --broker ID or --broker-defaults", code=2)
    if broker_defaults:
        return "", "the cluster-wide broker defaults"
    return str(broker), f"broker {broker}"


def _address(bootstrap: str | None, timeout: float | None, name: str,
             security=None) -> tuple[str, int, float]:
    """Where to send a broker resource's request: to that broker (as Kafka's AdminClient
    does), any broker for the defaults."""
    from .cluster import cluster_view

    timeout = options.timeout(timeout)
    view = cluster_view(options.bootstrap(bootstrap), timeout, security)
    for b in view["brokers"]:
        if not name or str(b["id"]) == name:
            return b["host"], b["port"], timeout
    raise CliError(f"no broker {name} in the cluster (brokers: "
                   f"{', '.join(str(b['id']) for b in view['brokers']) or 'none'})")


def broker_configs(bootstrap: str | None, timeout: float | None, name: str,
                   what: str, security=None) -> list[dict[str, Any]]:
    """Every config of broker `name` ("" for the cluster-wide defaults), as plain values; a
    sensitive one is marked so, and whoever shows it shows no value."""
    from .wire import SOURCES, describe_broker_configs

    host, port, timeout = _address(bootstrap, timeout, name, security)
    try:
        entries = describe_broker_configs(host, port, name, timeout, security)
    except CliError as exc:
        raise CliError(f"cannot describe the configs of {what}: {exc.message}") from None
    return [{"name": e.name, "value": e.value, "source": SOURCES.get(e.config_source, "UNKNOWN"),
             "read_only": e.read_only, "sensitive": e.is_sensitive,
             "synonyms": [{"name": s.name, "value": s.value,
                           "source": SOURCES.get(s.source, "UNKNOWN")} for s in e.synonyms]}
            for e in sorted(entries, key=lambda e: e.name)]


@app.command("describe")
def describe(
    broker: Optional[int] = typer.Option(None, "--broker", metavar="ID",
                                         help="The broker whose configuration to show."),
    broker_defaults: bool = typer.Option(False, "--broker-defaults",
                                         help="The cluster-wide dynamic defaults instead."),
    changed: bool = typer.Option(False, "--changed",
                                 help="Only configs not at their default."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Every config of a broker with its value, its source (DEFAULT_CONFIG,
    STATIC_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG) and whether
    it can be changed without a restart; secrets show as `(sensitive)`."""
    name, what = _target(broker, broker_defaults)
    configs = broker_configs(bootstrap, timeout, name, what)
    if changed:
        configs = [c for c in configs if c["source"] != "DEFAULT_CONFIG"]
    if fmt is Format.json:
        output.print_json(configs)
        return
    output.table(("CONFIG", "VALUE", "SOURCE", "DYNAMIC"),
                 [(c["name"], "(sensitive)" if c["sensitive"] else c["value"], c["source"],
                   "no" if c["read_only"] else "yes") for c in configs])


@app.command("alter")
def alter(
    broker: Optional[int] = typer.Option(None, "--broker", metavar="ID",
                                         help="Change this broker's dynamic configs."),
    broker_defaults: bool = typer.Option(False, "--broker-defaults",
                                         help="Change the cluster-wide dynamic defaults."),
    set_: list[str] = typer.Option([], "--set", help="key=value to set; repeatable."),
    delete_: list[str] = typer.Option([], "--delete",
                                      help="Key to remove (the next layer applies); repeatable."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Set or remove dynamic broker configs (incrementally: other configs stay as they are);
    they apply at once, without a restart, and persist."""
    name, what = _target(broker, broker_defaults)
    to_set = parse_configs(set_, "--set")
    to_delete = [k.strip() for k in delete_]
    if not to_set and not to_delete:
        raise CliError("nothing to change: give --set key=value or --delete key", code=2)
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise CliError(f"{both[0]} is both set and deleted", code=2)
    from .wire import alter_broker_configs

    host, port, timeout = _address(bootstrap, timeout, name)
    ops = [(k, SET, v) for k, v in to_set.items()] + [(k, DELETE, None) for k in to_delete]
    try:
        alter_broker_configs(host, port, name, ops, timeout)
    except CliError as exc:
        raise CliError(f"cannot alter the configs of {what}: {exc.message}") from None
    for k, v in to_set.items():
        output.line(f"Set {k}={v} on {what}.")
    for k in to_delete:
        output.line(f"Removed {k} from {what}.")
