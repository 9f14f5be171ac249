"""`brook cluster`: the brokers of the cluster and its controller, from DescribeCluster over
the Kafka protocol (what kafka-broker-api-versions.sh and zookeeper-shell are used for)."""

from __future__ import annotations

from typing import Any, Optional

from . import output
from .options import bootstrap_option, timeout_option
from .output import Format, output_option


def cluster_view(cluster) -> dict[str, Any]:
    """The cluster as plain values: id, controller id (None if none) and brokers by id."""
    result = cluster.wait(cluster.admin.describe_cluster(request_timeout=cluster.timeout),
                          "cannot describe the cluster")
    controller = result.controller
    return {
        "cluster_id": result.cluster_id,
        "controller": controller.id if controller is not None and controller.id >= 0 else None,
        "brokers": [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack or None}
                    for n in sorted(result.nodes, key=lambda n: n.id)],
    }


def cluster(
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """The cluster's id, its controller, and its live brokers (id, host:port, rack)."""
    from .client import Cluster

    view = cluster_view(Cluster(bootstrap, timeout))
    if fmt is Format.json:
        output.print_json(view)
        return
    output.line(f"ClusterId: {view['cluster_id']}  Controller: {output.cell(view['controller'])}")
    output.table(("BROKER", "HOST:PORT", "RACK", "CONTROLLER"),
                 [(b["id"], f"{b['host']}:{b['port']}", b["rack"],
                   "yes" if b["id"] == view["controller"] else "")
                  for b in view["brokers"]])
