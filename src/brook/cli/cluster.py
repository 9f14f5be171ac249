"""`brook cluster`: the brokers of the cluster and its controller, from DescribeCluster over
the Kafka protocol (the answer Kafka's AdminClient.describeCluster gets)."""

from __future__ import annotations

from typing import Any, Optional

from . import options, output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option


def cluster_view(bootstrap: str, timeout: float, security=None) -> dict[str, Any]:
    """The cluster as plain values, from the first bootstrap address that answers: id,
    controller id (None while there is none) and the brokers by id."""
    from .client import _addresses
    from .wire import describe_cluster

    failure = None
    for host, port in _addresses(bootstrap):
        try:
            response = describe_cluster(host, port, timeout, security)
        except CliError as exc:
            failure = exc
            continue
        return {
            "cluster_id": response.cluster_id,
            "controller": response.controller_id if response.controller_id >= 0 else None,
            "brokers": [{"id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in sorted(response.brokers, key=lambda b: b.broker_id)],
        }
    raise CliError(f"cannot describe the cluster: {failure.message if failure else 'no broker'}")


def cluster(
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """The cluster's id, its controller, and its live brokers (id, host:port, rack)."""
    view = cluster_view(options.bootstrap(bootstrap), options.timeout(timeout))
    if fmt is Format.json:
        output.print_json(view)
        return
    output.line(f"ClusterId: {view['cluster_id']}  Controller: {output.cell(view['controller'])}")
    output.table(("BROKER", "HOST:PORT", "RACK", "CONTROLLER"),
                 [(b["id"], f"{b['host']}:{b['port']}", b["rack"],
                   "yes" if b["id"] == view["controller"] else "")
                  for b in view["brokers"]])
