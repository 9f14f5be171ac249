"""Why a broker refuses to join a cluster (the start fails with one line, exit code 1).

Importing this module imports no ZooKeeper client: the command line catches these whatever
the mode."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The broker cannot take part in the cluster as configured."""


class BrokerIdInUseError(ClusterError):
    """/brokers/ids/<id> exists and belongs to another ZooKeeper session: another live broker
    runs with this broker.id (Kafka fails its start with a NodeExistsException here)."""

    def __init__(self, broker_id: int, path: str, owner: int, session: int,
                 endpoints: tuple = ()) -> None:
        self.broker_id = broker_id
        self.owner = owner
        #: the endpoints the registration in the way advertises (empty when unreadable)
        self.endpoints = endpoints
        super().__init__(
            f"Error while creating ephemeral at {path}, node already exists and owner "
            f"'0x{owner:x}' does not match current session '0x{session:x}': broker.id {broker_id} "
            f"is registered by another live broker; give this one another broker.id")


class LogDirOfflineError(ClusterError):
    """A log dir failed (a write to it failed: a full disk, an I/O error): the broker moved
    its leaderships to other in-sync replicas and stopped, as Kafka's broker does when its
    log dirs are offline."""

    def __init__(self, directory: str, reason: str) -> None:
        self.directory = directory
        super().__init__(f"log dir {directory} is offline ({reason}): this broker's leaderships "
                         "were moved to other in-sync replicas and it stopped; free space or "
                         "repair the disk, then start it again")


class ControllerMovedError(Exception):
    """A controller write found /controller_epoch changed: another broker is the controller
    now, and this one must stop acting as one (Kafka's ControllerMovedException)."""
