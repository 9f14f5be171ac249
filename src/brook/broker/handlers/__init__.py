"""One module per API family. Each declares `APIS`: the API keys it serves, the version
range of each and its handler; the registry here is what ApiVersions advertises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A response already encoded as pieces: bytes, and file regions to `sendfile`."""

    pieces: list[Any]
    size: int


class Deferred:
    """A handler's answer that is not ready yet (it waits for its writes to be on disk): the
    connection goes on with the next requests and sends this answer, in its place among the
    others, once the future ``waiting`` is done; ``build(waiting)`` then gives the response (a
    callback, not a task: this is the hot path of durable writes)."""

    __slots__ = ("waiting", "build")

    def __init__(self, waiting: Any, build: Callable[[Any], Any]) -> None:
        self.waiting = waiting
        self.build = build


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[..., Awaitable[Any]]  # (broker, request, connection) -> response | None


def registry() -> dict[int, Api]:
    from . import (acls, admin, api_versions, cluster, configs, delete_records, fetch, groups, list_offsets,
                   log_dirs, metadata, offsets, produce, producer_ids, replication, sasl, scram_users)
    from . import client_quotas

    apis: dict[int, Api] = {}
    for module in (api_versions, metadata, produce, fetch, list_offsets, admin, delete_records, configs,
                   log_dirs, cluster, producer_ids, groups, offsets, replication, sasl, scram_users,
                   acls, client_quotas):
        for api in module.APIS:
            if api.key in apis:
                raise RuntimeError(f"api key {api.key} is served twice")
            apis[api.key] = api
    return apis
